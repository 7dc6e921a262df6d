"""Batched greedy and beam search over :meth:`Seq2Seq.decode_step`.

Both run all sentences of a batch together (no Python loop over sentences),
cap each output at ``max_len_a * |src| + max_len_b`` tokens and stop a
sentence at ``<eos>``. A sentence that has stopped leaves the batch: its rows
are dropped from the decoder state and the encoder memory, so later steps
compute only for the sentences still running (on Multi30k a batch of 64 runs
about twice as many steps as its mean output length).

Beam search keeps its finished hypotheses apart from the K live beams, as
fairseq and Joey NMT do: a hypothesis that ends in ``<eos>`` among a step's K
best candidates is set aside (only the best one per sentence is kept, since
search returns one) and the K best candidates that do not end there live on.
A sentence stops when no live beam can still beat its best finished
hypothesis. The bound is exact for every ``alpha``: a live beam's score only
falls, and dividing a negative score by the largest length penalty it could
still reach, that of the length cap, gives the best it could end with. With
``alpha = 0`` this is the live beam's own score; with ``alpha > 0`` the bound
is loose and sentences often run on towards the cap. At the cap every live
beam competes as a cut hypothesis without ``<eos>``, as greedy search's are.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from seq2seq_attn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_attn.modules.seq2seq import Seq2Seq

OptTensor = Optional[Tensor]


@dataclass(frozen=True)
class SearchSettings:
    """How to search. ``beam_size`` 1 is greedy; ``alpha`` is the length penalty's exponent
    (Wu et al. 2016); outputs are capped at ``max_len_a * |src| + max_len_b`` tokens;
    ``keep_weights=False`` returns no attention weights (and skips their bookkeeping);
    ``coverage_penalty`` β adds ``β Σ_s log min(Σ_t a_ts, 1)`` to a finished hypothesis' score."""

    beam_size: int = 1
    alpha: float = 0.0
    max_len_a: float = 2.0
    max_len_b: int = 10
    keep_weights: bool = True
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    pad_id: int = PAD_ID
    coverage_penalty: float = 0.0  # β of Wu et al. 2016's coverage penalty (beam search, attention models)


class Hypotheses(NamedTuple):
    tokens: Tensor  # (B, T') ids without BOS; EOS where produced, PAD after it
    lengths: Tensor  # (B,) tokens before EOS
    scores: Tensor  # (B,) log-probability (beam: divided by the length penalty)
    weights: Optional[Tensor]  # (B, T', S) attention per output token, None without attention

    def to_lists(self) -> list[list[int]]:
        """Token ids per sentence, EOS and padding removed."""
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths.tolist())]


def max_lengths(src_lengths: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Output length cap per sentence. Args: src_lengths ``(B,)``. Returns ``(B,)``."""
    return (max_len_a * src_lengths.float() + max_len_b).long().clamp(min=1)


def length_penalty(lengths: Tensor, alpha: float) -> Tensor:
    """Wu et al. 2016, Eq. 14: ``((5 + |Y|) / 6) ** alpha``."""
    return ((5.0 + lengths.float()) / 6.0) ** alpha


def coverage_penalty(coverage: Tensor, real: Tensor, beta: float) -> Tensor:
    """Wu et al. 2016, Eq. 14: ``β Σ_s log min(coverage_s, 1)`` over the real source positions, the log
    floored at log 1e-6 so that a source word never attended costs a large, finite amount (never -inf).

    Args: coverage ``(..., S)`` attention summed over a hypothesis' steps, real ``(..., S)`` bool."""
    return beta * (coverage.clamp(1e-6, 1.0).log() * real).sum(-1)


def _forbid_specials(log_probs: Tensor, settings: SearchSettings) -> Tensor:
    """Forbid emitting BOS and PAD, in place (search owns the fresh tensor). Args: log_probs ``(N, V)``."""
    forbidden = torch.tensor([settings.bos_id, settings.pad_id], device=log_probs.device)
    return log_probs.index_fill_(-1, forbidden, float("-inf"))


TOPK_CHUNK = 64  # columns per chunk in row_topk: fastest of 32-256 for V = 6k, K = 1 and 5


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``x.topk(k, -1)`` for a wide ``x`` ``(N, V)``, about twice as fast on CPU.

    Splits each row into chunks of :data:`TOPK_CHUNK` columns, keeps the k chunks with
    the largest maxima (plus the ragged tail) and ranks only their columns. Exact: an
    element of the top k that sits in a dropped chunk would be below k chunk maxima, each
    of them a distinct element at least as large. Returns values and column indices ``(N, k)``.
    """
    rows, width = x.shape
    body = width // TOPK_CHUNK * TOPK_CHUNK  # columns in whole chunks
    if k * TOPK_CHUNK + (width - body) >= width:
        return x.topk(k, dim=-1)
    chunk_max = x[:, :body].view(rows, -1, TOPK_CHUNK).amax(-1)  # (N, V // C)
    chunks = chunk_max.topk(k, dim=-1).indices  # (N, k)
    offsets = torch.arange(TOPK_CHUNK, device=x.device)  # (C,)
    columns = (chunks.unsqueeze(-1) * TOPK_CHUNK + offsets).view(rows, -1)  # (N, k*C)
    if body < width:  # the tail is always a candidate
        tail = torch.arange(body, width, device=x.device).expand(rows, -1)  # (N, V - body)
        columns = torch.cat([columns, tail], dim=1)
    values, pick = x.gather(1, columns).topk(k, dim=-1)  # (N, k)
    return values, columns.gather(1, pick)


def _lengths_before_eos(tokens: Tensor, eos_id: int, pad_id: int) -> Tensor:
    """Args: tokens ``(B, T')``. Returns ``(B,)`` count of tokens before EOS/PAD."""
    stop = (tokens == eos_id) | (tokens == pad_id)  # (B, T')
    no_stop = torch.full_like(tokens[:, 0], tokens.size(1))  # (B,)
    return torch.where(stop.any(1), stop.float().argmax(1), no_stop)


class _Results:
    """Output buffers of the whole batch, filled row by row as sentences stop."""

    def __init__(self, batch: int, steps: int, settings: SearchSettings, device: torch.device) -> None:
        self.settings = settings
        self.tokens = torch.full((batch, steps), settings.pad_id, dtype=torch.long, device=device)  # (B, T')
        self.scores = torch.zeros(batch, device=device)  # (B,)
        self.weights: Optional[Tensor] = None  # (B, T', S), made on the first step that has attention

    def attention(self, like: Tensor) -> Tensor:
        """The weights buffer, made on first use. Args: like ``(N, ..., S)`` a step's weights."""
        if self.weights is None:
            batch, steps = self.tokens.shape
            self.weights = like.new_zeros(batch, steps, like.size(-1))
        return self.weights

    def offer(self, rows: Tensor, scores: Tensor, tokens: Tensor, weights: Optional[Tensor]) -> None:
        """Keep each candidate that beats its sentence's best so far.

        Args: rows ``(N,)`` batch rows, scores ``(N,)`` normalised, tokens ``(N, t)``, weights ``(N, t, S)``."""
        better = scores > self.scores[rows]  # (N,)
        if not bool(better.any()):
            return
        rows, length = rows[better], tokens.size(1)
        self.scores[rows] = scores[better]
        self.tokens[rows] = self.settings.pad_id
        self.tokens[rows, :length] = tokens[better]
        if weights is not None:
            buffer = self.attention(weights)
            buffer[rows] = 0.0
            buffer[rows, :length] = weights[better]

    def hypotheses(self, steps: int) -> Hypotheses:
        """Cut the buffers to the ``steps`` that ran."""
        tokens = self.tokens[:, :steps]
        weights = None if self.weights is None else self.weights[:, :steps]
        lengths = _lengths_before_eos(tokens, self.settings.eos_id, self.settings.pad_id)
        return Hypotheses(tokens, lengths, self.scores, weights)


@torch.no_grad()
def greedy_search(model: Seq2Seq, src: Tensor, src_lengths: Tensor, settings: SearchSettings) -> Hypotheses:
    """Pick the most probable token at every step. Args: src ``(B, S)``, src_lengths ``(B,)``."""
    memory, state = model.encode(src, src_lengths)
    limit = max_lengths(src_lengths, settings.max_len_a, settings.max_len_b)  # (A,) for the A still running
    steps = int(limit.max())
    results = _Results(src.size(0), steps, settings, src.device)
    alive = torch.arange(src.size(0), device=src.device)  # (A,) their rows in the batch
    prev = torch.full_like(src_lengths, settings.bos_id)  # (A,)
    for t in range(steps):
        out = model.decode_step(prev, state, memory)
        logp, token = row_topk(_forbid_specials(out.log_probs, settings), 1)  # (A, 1), (A, 1)
        logp, token = logp.squeeze(1), token.squeeze(1)  # (A,)
        results.scores.index_add_(0, alive, logp.float())  # fp32 sums, also under bf16 autocast
        results.tokens[alive, t] = token
        if settings.keep_weights and out.weights is not None:
            results.attention(out.weights)[alive, t] = out.weights
        stop = (token == settings.eos_id) | (t + 1 >= limit)  # (A,)
        if bool(stop.all()):
            break
        prev, state = token, out.state
        if bool(stop.any()):  # the stopped sentences leave the batch
            keep = (~stop).nonzero().squeeze(1)  # (A',)
            alive, limit, prev = alive[keep], limit[keep], prev[keep]
            state, memory = state.index_select(keep), memory.index_select(keep)
    return results.hypotheses(t + 1)


class _Beams:
    """The live beams of the A sentences still running: scores ``(A, K)`` (log p, best first),
    tokens ``(A, K, t)`` and attention ``(A, K, t, S)`` so far."""

    def __init__(self, batch: int, k: int, device: torch.device) -> None:
        self.k = k
        self.alive = torch.arange(batch, device=device)  # (A,) rows in the batch
        self.scores = torch.full((batch, k), float("-inf"), device=device)  # (A, K)
        self.scores[:, 0] = 0.0  # one live beam at the start, not K copies of it
        self.tokens = torch.zeros(batch, k, 0, dtype=torch.long, device=device)  # (A, K, t)
        self.weights: Optional[Tensor] = None  # (A, K, t, S)
        self.coverage: Optional[Tensor] = None  # (A, K, S) attention summed so far (coverage penalty only)

    def extended(self, parent: Tensor, token: Tensor, step_weights: Optional[Tensor]) -> tuple[Tensor, OptTensor]:
        """The histories of ``parent`` beams followed by ``token``. Args: parent, token ``(A, N)``;
        step_weights ``(A, K, S)``. Returns tokens ``(A, N, t+1)``, weights ``(A, N, t+1, S)``."""
        tokens = torch.cat([_pick(self.tokens, parent), token.unsqueeze(-1)], dim=-1)  # (A, N, t+1)
        if step_weights is None:
            return tokens, None
        step = _pick(step_weights, parent).unsqueeze(2)  # (A, N, 1, S)
        weights = step if self.weights is None else torch.cat([_pick(self.weights, parent), step], dim=2)
        return tokens, weights

    def keep(self, index: Tensor) -> None:
        """Keep the sentences at ``index`` ``(A',)``, in that order."""
        self.alive, self.scores, self.tokens = self.alive[index], self.scores[index], self.tokens[index]
        self.weights = None if self.weights is None else self.weights[index]
        self.coverage = None if self.coverage is None else self.coverage[index]

    def rows(self, index: Tensor) -> Tensor:
        """Flat ``(A * K)`` rows of the beams of the sentences at ``index`` ``(A',)``: ``(A' * K,)``."""
        return (index.unsqueeze(1) * self.k + torch.arange(self.k, device=index.device)).view(-1)


def _pick(history: Tensor, beam: Tensor) -> Tensor:
    """Each sentence's ``beam`` entries. Args: history ``(A, K, ...)``, beam ``(A, N)``. Returns ``(A, N, ...)``."""
    index = beam.view(*beam.shape, *([1] * (history.dim() - 2))).expand(-1, -1, *history.shape[2:])
    return history.gather(1, index)


def _set_aside_finished(
    beams: _Beams, results: _Results, cand: Tensor, is_eos: Tensor, t: int, step_w: OptTensor, bonus: OptTensor
) -> None:
    """Offer each sentence's best candidate that ends in EOS among its K best.

    Args: cand ``(A, K, W)`` scores of each beam's W best continuations, is_eos ``(A, K, W)``;
    bonus ``(A, K)`` what finishing after each beam adds to the normalised score (the coverage penalty)."""
    width, settings = cand.size(-1), results.settings
    top_scores, top = cand.view(cand.size(0), -1).topk(beams.k, dim=-1)  # (A, K)
    ends = is_eos.view(cand.size(0), -1).gather(1, top) & torch.isfinite(top_scores)  # (A, K)
    if not bool(ends.any()):
        return
    ranked = top_scores / length_penalty(torch.tensor(t + 1), settings.alpha)  # (A, K) all of length t+1
    if bonus is not None:
        ranked = ranked + bonus.gather(1, top // width)
    best, at = ranked.masked_fill(~ends, float("-inf")).max(-1, keepdim=True)  # (A, 1)
    parent = top.gather(1, at) // width  # (A, 1)
    eos = torch.full_like(parent, settings.eos_id)  # (A, 1)
    tokens, weights = beams.extended(parent, eos, step_w)  # (A, 1, t+1), (A, 1, t+1, S)
    weights = None if weights is None else weights.squeeze(1)
    results.offer(beams.alive, best.squeeze(1), tokens.squeeze(1), weights)


@torch.no_grad()
def beam_search(model: Seq2Seq, src: Tensor, src_lengths: Tensor, settings: SearchSettings) -> Hypotheses:
    """Batched beam search with the length penalty of Wu et al. 2016 (see the module docstring).

    Hypotheses are ranked by ``log p / lp(length)``, the length counting the EOS token."""
    k, alpha, device = settings.beam_size, settings.alpha, src.device
    memory, state = model.encode(src, src_lengths)
    rows = torch.arange(src.size(0), device=device).repeat_interleave(k)  # (B*K,)
    memory, state = memory.index_select(rows), state.index_select(rows)
    limit = max_lengths(src_lengths, settings.max_len_a, settings.max_len_b)  # (A,)
    steps = int(limit.max())
    results = _Results(src.size(0), steps, settings, device)
    results.scores.fill_(float("-inf"))
    beams = _Beams(src.size(0), k, device)
    real = torch.arange(src.size(1), device=device) < src_lengths.unsqueeze(1)  # (A, S) for the coverage penalty
    prev = torch.full((src.size(0) * k,), settings.bos_id, dtype=torch.long, device=device)  # (A*K,)
    for t in range(steps):
        out = model.decode_step(prev, state, memory)
        logp = _forbid_specials(out.log_probs, settings)  # (A*K, V)
        width = min(k + 1, logp.size(-1))  # K live continuations per beam even when one is EOS
        values, tokens = row_topk(logp, width)  # (A*K, W)
        cand = beams.scores.unsqueeze(-1) + values.view(-1, k, width).float()  # (A, K, W) fp32 under autocast
        tokens = tokens.view(-1, k, width)  # (A, K, W)
        is_eos = tokens == settings.eos_id  # (A, K, W)
        all_w = None if out.weights is None else out.weights.view(-1, k, out.weights.size(-1))  # (A, K, S)
        step_w = all_w if settings.keep_weights else None
        covered, bonus = None, None  # (A, K, S) each beam's coverage after this step; (A, K) its penalty
        if settings.coverage_penalty and all_w is not None:
            covered = all_w.float() if beams.coverage is None else beams.coverage + all_w.float()
            bonus = coverage_penalty(covered, real.unsqueeze(1), settings.coverage_penalty)
        _set_aside_finished(beams, results, cand, is_eos, t, step_w, bonus)
        scores, pick = cand.masked_fill(is_eos, float("-inf")).view(-1, k * width).topk(k, dim=-1)  # (A, K)
        parent = pick // width  # (A, K)
        token = tokens.view(-1, k * width).gather(1, pick)  # (A, K)
        beams.tokens, beams.weights = beams.extended(parent, token, step_w)
        beams.scores = scores
        beams.coverage = None if covered is None else _pick(covered, parent)
        capped = t + 1 >= limit  # (A,)
        # every live beam competes as a cut hypothesis: the coverage penalty can rank another above the
        # most probable one
        if bool(capped.any()):
            at = capped.nonzero().squeeze(1)  # (C,)
            cut = scores[at] / length_penalty(torch.tensor(t + 1), alpha)  # (C, K)
            if beams.coverage is not None:
                cut = cut + coverage_penalty(beams.coverage[at], real[at].unsqueeze(1), settings.coverage_penalty)
            best, which = cut.max(-1)  # (C,)
            weights = None if beams.weights is None else beams.weights[at, which]
            results.offer(beams.alive[at], best, beams.tokens[at, which], weights)
        bound = scores[:, 0] / length_penalty(limit, alpha)  # (A,) the best any live beam can end with
        done = capped | (results.scores[beams.alive] >= bound)  # (A,)
        if bool(done.all()):
            break
        origin = (parent + torch.arange(0, parent.numel(), k, device=device).unsqueeze(1)).view(-1)  # (A*K,)
        prev = token.view(-1)  # (A*K,)
        if bool(done.any()):  # the stopped sentences leave the batch
            keep = (~done).nonzero().squeeze(1)  # (A',)
            survivors = beams.rows(keep)  # (A'*K,)
            origin, prev, memory = origin[survivors], prev[survivors], memory.index_select(survivors)
            limit, real = limit[keep], real[keep]
            beams.keep(keep)
        state = out.state.index_select(origin)
    return results.hypotheses(t + 1)


def search(model: Seq2Seq, src: Tensor, src_lengths: Tensor, settings: SearchSettings) -> Hypotheses:
    """Greedy search for ``beam_size == 1``, beam search otherwise."""
    if settings.beam_size == 1:
        return greedy_search(model, src, src_lengths, settings)
    return beam_search(model, src, src_lengths, settings)
