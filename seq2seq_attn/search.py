"""Batched greedy and beam search over :meth:`Seq2Seq.decode_step`.

Both run all sentences of a batch together (no Python loop over sentences),
cap each output at ``max_len_a * |src| + max_len_b`` tokens and stop a
sentence at ``<eos>``; the loop ends when every sentence has stopped.
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


def _allowed_log_probs(log_probs: Tensor, bos_id: int, pad_id: int) -> Tensor:
    """Forbid emitting BOS and PAD, in place (search owns the fresh tensor). Args: log_probs ``(N, V)``."""
    return log_probs.index_fill_(-1, torch.tensor([bos_id, pad_id], device=log_probs.device), float("-inf"))


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
) -> Hypotheses:
    """Pick the most probable token at every step. Args: src ``(B, S)``, src_lengths ``(B,)``."""
    memory, state = model.encode(src, src_lengths)
    limit = max_lengths(src_lengths, max_len_a, max_len_b)  # (B,)
    prev = torch.full_like(src_lengths, bos_id)  # (B,)
    finished = torch.zeros_like(src_lengths, dtype=torch.bool)  # (B,)
    score = torch.zeros(src.size(0), device=src.device)  # (B,)
    tokens, weights = [], []
    for t in range(int(limit.max())):
        out = model.decode_step(prev, state, memory)
        logp, token = _allowed_log_probs(out.log_probs, bos_id, pad_id).max(dim=-1)  # (B,), (B,)
        token = token.masked_fill(finished, pad_id)
        score = score + logp.masked_fill(finished, 0.0)
        tokens.append(token)
        if out.weights is not None:
            weights.append(out.weights.masked_fill(finished.unsqueeze(1), 0.0))  # (B, S)
        finished = finished | (token == eos_id) | (t + 1 >= limit)
        if bool(finished.all()):
            break
        prev, state = token, out.state
    all_tokens = torch.stack(tokens, dim=1)  # (B, T')
    all_weights = torch.stack(weights, dim=1) if weights else None  # (B, T', S)
    lengths = _lengths_before_eos(all_tokens, eos_id, pad_id)
    return Hypotheses(all_tokens, lengths, score, all_weights)


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
) -> Hypotheses:
    """Batched beam search with the length penalty of Wu et al. 2016.

    Beams are ranked by ``log p / lp(length)``. A finished beam stays in the
    beam and only extends with PAD at no cost; a sentence stops when all its K
    beams are finished (with ``alpha = 0``, as soon as its best beam is, since
    unnormalised scores only fall).
    """
    batch, k = src.size(0), beam_size
    memory, state = model.encode(src, src_lengths)
    rows = torch.arange(batch, device=src.device).repeat_interleave(k)  # (B*K,)
    memory, state = memory.index_select(rows), state.index_select(rows)
    limit = max_lengths(src_lengths, max_len_a, max_len_b)  # (B,)
    scores = torch.full((batch, k), float("-inf"), device=src.device)  # (B, K)
    scores[:, 0] = 0.0
    finished = torch.zeros(batch, k, dtype=torch.bool, device=src.device)  # (B, K)
    lengths = torch.zeros(batch, k, dtype=torch.long, device=src.device)  # (B, K)
    tokens = torch.zeros(batch, k, 0, dtype=torch.long, device=src.device)  # (B, K, t)
    weights: Optional[Tensor] = None  # (B, K, t, S)
    prev = torch.full((batch * k,), bos_id, dtype=torch.long, device=src.device)  # (B*K,)
    offsets = torch.arange(batch, device=src.device).unsqueeze(1) * k  # (B, 1)
    for t in range(int(limit.max())):
        out = model.decode_step(prev, state, memory)
        vocab = out.log_probs.size(-1)
        # in place on the step's fresh (B*K, V) log-probabilities: each full pass over V costs as much as the GEMM
        logp = _allowed_log_probs(out.log_probs, bos_id, pad_id).view(batch, k, vocab)  # (B, K, V)
        if bool(finished.any()):  # a finished beam extends only with PAD, at no cost
            logp[finished] = float("-inf")
            logp[..., pad_id].masked_fill_(finished, 0.0)
        candidates = logp.add_(scores.unsqueeze(-1))  # (B, K, V)
        new_lengths = lengths + (~finished).long()  # (B, K)
        ranked = candidates / length_penalty(new_lengths, alpha).unsqueeze(-1) if alpha else candidates  # (B, K, V)
        _, flat = ranked.view(batch, k * vocab).topk(k, dim=-1)  # (B, K)
        beam, token = flat // vocab, flat % vocab  # (B, K), (B, K)
        scores = candidates.view(batch, k * vocab).gather(1, flat)  # (B, K)
        lengths = new_lengths.gather(1, beam)  # (B, K)
        was_finished = finished.gather(1, beam)  # (B, K)
        finished = was_finished | (token == eos_id)  # (B, K)
        origin = (offsets + beam).view(-1)  # (B*K,)
        tokens = torch.cat([_reorder(tokens, beam), token.unsqueeze(-1)], dim=-1)  # (B, K, t+1)
        if out.weights is not None:
            step_w = out.weights.index_select(0, origin).view(batch, k, 1, -1)  # (B, K, 1, S)
            step_w = step_w.masked_fill(was_finished.view(batch, k, 1, 1), 0.0)
            weights = step_w if weights is None else torch.cat([_reorder(weights, beam), step_w], 2)
        done = finished.all(1) | (t + 1 >= limit)  # (B,)
        if alpha == 0.0:
            done = done | finished[:, 0]
        finished = finished | done.unsqueeze(1)
        if bool(done.all()):
            break
        prev, state = token.view(-1), out.state.index_select(origin)
    final = scores / length_penalty(lengths, alpha)  # (B, K)
    best_scores, best = final.max(dim=-1)  # (B,), (B,)
    pick = torch.arange(batch, device=src.device)
    best_tokens = tokens[pick, best]  # (B, T')
    best_weights = None if weights is None else weights[pick, best]  # (B, T', S)
    lengths = _lengths_before_eos(best_tokens, eos_id, pad_id)
    return Hypotheses(best_tokens, lengths, best_scores, best_weights)


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
) -> Hypotheses:
    """Greedy search for ``beam_size == 1``, beam search otherwise."""
    if beam_size == 1:
        return greedy_search(model, src, src_lengths, bos_id, eos_id, pad_id, max_len_a, max_len_b)
    return beam_search(model, src, src_lengths, bos_id, eos_id, pad_id, beam_size, alpha, max_len_a, max_len_b)
