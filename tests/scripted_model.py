"""A model whose next-token distribution is a table lookup on the prefix, for testing search exactly."""

import itertools
import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor

from seq2seq_attn.modules.seq2seq import StepResult
from seq2seq_attn.search import length_penalty

PAD, BOS, EOS = 0, 1, 2
Probs = Callable[[int, tuple[int, ...]], list[float]]  # (sentence, prefix) -> p over the vocabulary


class Rows(NamedTuple):
    """Per-row search state: which sentence, and the tokens produced so far."""

    sentence: Tensor  # (N,)
    prefixes: tuple[tuple[int, ...], ...]

    def index_select(self, index: Tensor) -> "Rows":
        return Rows(self.sentence[index], tuple(self.prefixes[i] for i in index.tolist()))


class ScriptedModel:
    """``decode_step`` returns ``log probs(sentence, prefix)``; the first source id is the sentence number.

    With ``attention`` (same signature as ``probs``, a distribution over the S source positions) each step
    also returns those weights, so that the coverage penalty has something to count."""

    def __init__(self, probs: Probs, attention: Optional[Probs] = None) -> None:
        self.probs, self.attention = probs, attention

    def encode(self, src: Tensor, src_lengths: Tensor) -> tuple[Rows, Rows]:
        rows = Rows(src[:, 0].clone(), tuple(() for _ in range(src.size(0))))
        return rows, rows

    def decode_step(self, prev: Tensor, state: Rows, memory: Rows) -> StepResult:
        prefixes = tuple(p if token == BOS else (*p, token) for p, token in zip(state.prefixes, prev.tolist()))
        table = [self.probs(int(s), p) for s, p in zip(state.sentence.tolist(), prefixes)]
        log_probs = torch.tensor(table, dtype=torch.float32).log()  # (N, V)
        weights = None
        if self.attention is not None:
            rows = [self.attention(int(s), p) for s, p in zip(state.sentence.tolist(), prefixes)]
            weights = torch.tensor(rows, dtype=torch.float32)  # (N, S)
        return StepResult(log_probs, Rows(state.sentence, prefixes), weights)


def random_table(vocab: int, seed: int) -> Probs:
    """Seeded random distributions per (sentence, prefix); BOS and PAD get none of the mass."""

    def probs(sentence: int, prefix: tuple[int, ...]) -> list[float]:
        g = torch.Generator().manual_seed(hash((seed, sentence, prefix)) % (2**31))
        p = torch.rand(vocab, generator=g) ** 3
        p[PAD] = p[BOS] = 0.0
        return (p / p.sum()).tolist()

    return probs


def score(probs: Probs, sentence: int, tokens: tuple[int, ...]) -> float:
    """Sum of log p of ``tokens`` (EOS included where it ends them)."""
    return sum(math.log(probs(sentence, tokens[:i])[tok]) for i, tok in enumerate(tokens))


def random_attention(sources: int, seed: int) -> Probs:
    """Seeded attention distributions over ``sources`` positions per (sentence, prefix)."""

    def weights(sentence: int, prefix: tuple[int, ...]) -> list[float]:
        g = torch.Generator().manual_seed(hash(("attention", seed, sentence, prefix)) % (2**31))
        w = torch.rand(sources, generator=g) ** 4
        return (w / w.sum()).tolist()

    return weights


def coverage_term(attention: Probs, sentence: int, tokens: tuple[int, ...], beta: float) -> float:
    """Wu et al.'s ``β Σ_s log min(Σ_t a_ts, 1)`` over the steps that emitted ``tokens`` (EOS included)."""
    covered = [sum(column) for column in zip(*(attention(sentence, tokens[:i]) for i in range(len(tokens))))]
    return beta * sum(math.log(min(max(c, 1e-6), 1.0)) for c in covered)


def exhaustive_best(
    probs: Probs,
    sentence: int,
    vocab: int,
    cap: int,
    alpha: float,
    attention: Optional[Probs] = None,
    beta: float = 0.0,
) -> tuple[tuple[int, ...], float]:
    """The best hypothesis over every sequence: ending in EOS within ``cap`` tokens, or cut at ``cap``;
    ranked by ``log p / lp(length)``, plus the coverage penalty where ``attention`` and ``beta`` are given."""
    words = [w for w in range(vocab) if w not in (PAD, BOS, EOS)]
    candidates = [(*body, EOS) for n in range(cap) for body in itertools.product(words, repeat=n)]
    candidates += list(itertools.product(words, repeat=cap))

    def ranked(c: tuple[int, ...]) -> float:
        value = score(probs, sentence, c) / float(length_penalty(torch.tensor(len(c)), alpha))
        return value + (coverage_term(attention, sentence, c, beta) if attention is not None else 0.0)

    best_score, best = max((ranked(c), c) for c in candidates)
    return best, best_score
