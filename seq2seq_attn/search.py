"""Batched greedy and beam search over :meth:`Seq2Seq.decode_step`.

Both run all sentences of a batch together (no Python loop over sentences),
cap each output at ``max_len_a * |src| + max_len_b`` tokens and stop a
sentence at ``<eos>``. A sentence that has stopped leaves the batch: its rows
are dropped from the decoder state and the encoder memory, so later steps
compute only for the sentences still running (on Multi30k a batch of 64 runs
about twice as many steps as its mean output length). Beam search ranks only
each beam's K best tokens, because the K best continuations of a step always
come from those: the work over the vocabulary is one log-softmax and one
per-row top-k, not a pass per score update over all K x V candidates.
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from seq2seq_attn.modules.seq2seq import Seq2Seq


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


def _forbid_specials(log_probs: Tensor, bos_id: int, pad_id: int) -> Tensor:
    """Forbid emitting BOS and PAD, in place (search owns the fresh tensor). Args: log_probs ``(N, V)``."""
    return log_probs.index_fill_(-1, torch.tensor([bos_id, pad_id], device=log_probs.device), float("-inf"))


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
    first = torch.where(stop.any(1), stop.float().argmax(1), no_stop)  # (B,)
    return first


def _reorder(history: Tensor, beam: Tensor) -> Tensor:
    """Follow each surviving beam back to its parent. Args: history ``(B, K, ...)``, beam ``(B, K)``."""
    index = beam.view(*beam.shape, *([1] * (history.dim() - 2))).expand_as(history)
    return history.gather(1, index)  # (B, K, ...)


class _Results:
    """Output buffers of the whole batch, filled row by row as sentences stop."""

    def __init__(self, batch: int, steps: int, pad_id: int, device: torch.device) -> None:
        self.tokens = torch.full((batch, steps), pad_id, dtype=torch.long, device=device)  # (B, T')
        self.scores = torch.zeros(batch, device=device)  # (B,)
        self.weights: Optional[Tensor] = None  # (B, T', S), made on the first step that has attention

    def attention(self, like: Tensor) -> Tensor:
        """The weights buffer, made on first use. Args: like ``(N, S)`` a step's weights."""
        if self.weights is None:
            batch, steps = self.tokens.shape
            self.weights = like.new_zeros(batch, steps, like.size(-1))
        return self.weights

    def hypotheses(self, steps: int, eos_id: int, pad_id: int) -> Hypotheses:
        """Cut the buffers to the ``steps`` that ran."""
        tokens = self.tokens[:, :steps]
        weights = None if self.weights is None else self.weights[:, :steps]
        return Hypotheses(tokens, _lengths_before_eos(tokens, eos_id, pad_id), self.scores, weights)


@torch.no_grad()
def greedy_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    max_len_a: float = 2.0,
    max_len_b: int = 10,
    keep_weights: bool = True,
) -> Hypotheses:
    """Pick the most probable token at every step. Args: src ``(B, S)``, src_lengths ``(B,)``.

    ``keep_weights=False``: no attention weights in the result (:attr:`Hypotheses.weights` None)."""
    memory, state = model.encode(src, src_lengths)
    limit = max_lengths(src_lengths, max_len_a, max_len_b)  # (A,) for the A sentences still running
    steps = int(limit.max())
    results = _Results(src.size(0), steps, pad_id, src.device)
    alive = torch.arange(src.size(0), device=src.device)  # (A,) their rows in the batch
    prev = torch.full_like(src_lengths, bos_id)  # (A,)
    for t in range(steps):
        out = model.decode_step(prev, state, memory)
        logp, token = row_topk(_forbid_specials(out.log_probs, bos_id, pad_id), 1)  # (A, 1), (A, 1)
        logp, token = logp.squeeze(1), token.squeeze(1)  # (A,)
        results.scores.index_add_(0, alive, logp.float())  # fp32 sums, also under bf16 autocast
        results.tokens[alive, t] = token
        if keep_weights and out.weights is not None:
            results.attention(out.weights)[alive, t] = out.weights
        stop = (token == eos_id) | (t + 1 >= limit)  # (A,)
        if bool(stop.all()):
            break
        prev, state = token, out.state
        if bool(stop.any()):  # the stopped sentences leave the batch
            keep = (~stop).nonzero().squeeze(1)  # (A',)
            alive, limit, prev = alive[keep], limit[keep], prev[keep]
            state, memory = state.index_select(keep), memory.index_select(keep)
    return results.hypotheses(t + 1, eos_id, pad_id)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    beam_size: int = 5,
    alpha: float = 0.0,
    max_len_a: float = 2.0,
    max_len_b: int = 10,
    keep_weights: bool = True,
) -> Hypotheses:
    """Batched beam search with the length penalty of Wu et al. 2016.

    Beams are ranked by ``log p / lp(length)``. A finished beam stays in the
    beam and only extends with PAD at no cost; a sentence stops when all its K
    beams are finished (with ``alpha = 0``, as soon as its best beam is, since
    unnormalised scores only fall) and leaves the batch with its best beam. ``keep_weights=False``
    skips the attention history (its reordering grows with every step): weights None.
    """
    k, device = beam_size, src.device
    memory, state = model.encode(src, src_lengths)
    rows = torch.arange(src.size(0), device=device).repeat_interleave(k)  # (B*K,)
    memory, state = memory.index_select(rows), state.index_select(rows)
    limit = max_lengths(src_lengths, max_len_a, max_len_b)  # (A,) for the A sentences still running
    steps = int(limit.max())
    results = _Results(src.size(0), steps, pad_id, device)
    alive = torch.arange(src.size(0), device=device)  # (A,) their rows in the batch
    scores = torch.full((src.size(0), k), float("-inf"), device=device)  # (A, K)
    scores[:, 0] = 0.0
    finished = torch.zeros_like(scores, dtype=torch.bool)  # (A, K)
    lengths = torch.zeros_like(scores, dtype=torch.long)  # (A, K)
    history = torch.zeros(src.size(0), k, 0, dtype=torch.long, device=device)  # (A, K, t)
    attention: Optional[Tensor] = None  # (A, K, t, S)
    prev = torch.full((src.size(0) * k,), bos_id, dtype=torch.long, device=device)  # (A*K,)
    for t in range(steps):
        out = model.decode_step(prev, state, memory)
        # each beam's K best continuations: the step's K best are among them
        logp, top_tokens = row_topk(_forbid_specials(out.log_probs, bos_id, pad_id), k)  # (A*K, K)
        logp = logp.view(-1, k, k).float()  # (A, K, K) fp32 scores, also under bf16 autocast
        top_tokens = top_tokens.view(-1, k, k)  # (A, K, K)
        if bool(finished.any()):  # a finished beam extends only with PAD, at no cost
            logp[finished] = float("-inf")
            logp[..., 0].masked_fill_(finished, 0.0)
            top_tokens[..., 0].masked_fill_(finished, pad_id)
        candidates = logp.add_(scores.unsqueeze(-1))  # (A, K, K)
        new_lengths = lengths + (~finished).long()  # (A, K)
        ranked = candidates / length_penalty(new_lengths, alpha).unsqueeze(-1) if alpha else candidates
        _, flat = ranked.view(-1, k * k).topk(k, dim=-1)  # (A, K)
        beam = flat // k  # (A, K) each survivor's parent beam
        token = top_tokens.view(-1, k * k).gather(1, flat)  # (A, K)
        scores = candidates.view(-1, k * k).gather(1, flat)  # (A, K)
        lengths = new_lengths.gather(1, beam)  # (A, K)
        was_finished = finished.gather(1, beam)  # (A, K)
        finished = was_finished | (token == eos_id)  # (A, K)
        history = torch.cat([_reorder(history, beam), token.unsqueeze(-1)], dim=-1)  # (A, K, t+1)
        origin = beam + torch.arange(0, beam.numel(), k, device=device).unsqueeze(1)  # (A, K) parent rows
        if keep_weights and out.weights is not None:
            step_w = out.weights[origin.view(-1)].view(-1, k, 1, out.weights.size(-1))  # (A, K, 1, S)
            step_w = step_w.masked_fill(was_finished.view(-1, k, 1, 1), 0.0)
            attention = step_w if attention is None else torch.cat([_reorder(attention, beam), step_w], 2)
        done = finished.all(1) | (t + 1 >= limit)  # (A,)
        if alpha == 0.0:
            done = done | finished[:, 0]
        if bool(done.any()):  # the stopped sentences leave the batch with their best beam
            stopped = done.nonzero().squeeze(1)  # (D,)
            best_scores, best = (scores[stopped] / length_penalty(lengths[stopped], alpha)).max(-1)  # (D,)
            results.scores[alive[stopped]] = best_scores
            results.tokens[alive[stopped], : t + 1] = history[stopped, best]
            if attention is not None:
                results.attention(out.weights)[alive[stopped], : t + 1] = attention[stopped, best]
            if bool(done.all()):
                break
            keep = (~done).nonzero().squeeze(1)  # (A',)
            alive, limit, scores, finished = alive[keep], limit[keep], scores[keep], finished[keep]
            lengths, history, token, origin = lengths[keep], history[keep], token[keep], origin[keep]
            attention = None if attention is None else attention[keep]
            memory = memory.index_select((keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1))
        prev, state = token.view(-1), out.state.index_select(origin.view(-1))
    return results.hypotheses(t + 1, eos_id, pad_id)


def search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    bos_id: int,
    eos_id: int,
    pad_id: int = 0,
    beam_size: int = 1,
    alpha: float = 0.0,
    max_len_a: float = 2.0,
    max_len_b: int = 10,
    keep_weights: bool = True,
) -> Hypotheses:
    """Greedy search for ``beam_size == 1``, beam search otherwise."""
    if beam_size == 1:
        return greedy_search(model, src, src_lengths, bos_id, eos_id, pad_id, max_len_a, max_len_b, keep_weights)
    return beam_search(
        model, src, src_lengths, bos_id, eos_id, pad_id, beam_size, alpha, max_len_a, max_len_b, keep_weights
    )
