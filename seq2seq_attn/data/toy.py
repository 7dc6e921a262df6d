"""Toy tasks with a known alignment: copy, reverse, sort.

Each example is a random symbol sequence, its transformation, and the gold
alignment (the source position each target token copies), so attention can
be scored against the truth. Generation is deterministic for a seed.
"""

from typing import Callable, NamedTuple

import numpy as np

from seq2seq_attn.data.vocab import Vocab
from seq2seq_attn.errors import ConfigError


class Example(NamedTuple):
    src: list[int]  # token ids, no BOS/EOS
    trg: list[int]
    alignment: list[int]  # per target token, the source position it copies (-1: none)


def _copy(seq: np.ndarray) -> np.ndarray:
    return np.arange(len(seq))


def _reverse(seq: np.ndarray) -> np.ndarray:
    return np.arange(len(seq))[::-1].copy()


def _sort(seq: np.ndarray) -> np.ndarray:
    return np.argsort(seq, kind="stable")


# task name -> the source position of each target token
TASKS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": _copy,
    "reverse": _reverse,
    "sort": _sort,
}


def symbol_names(num_symbols: int) -> list[str]:
    """Readable symbols: ``a``..``z`` up to 26, else ``s0``, ``s1``, ..."""
    if num_symbols <= 26:
        return [chr(ord("a") + i) for i in range(num_symbols)]
    return [f"s{i}" for i in range(num_symbols)]


def toy_vocab(num_symbols: int) -> Vocab:
    return Vocab(symbol_names(num_symbols))


def make_examples(task: str, vocab: Vocab, min_len: int, max_len: int, size: int, seed: int) -> list[Example]:
    """``size`` examples with lengths uniform in ``[min_len, max_len]``."""
    if task not in TASKS:
        raise ConfigError(f"unknown toy task {task!r}: choose one of {sorted(TASKS)}")
    if not 1 <= min_len <= max_len:
        raise ConfigError(f"toy lengths must satisfy 1 <= min <= max, got [{min_len}, {max_len}]")
    rng = np.random.default_rng(seed)
    first_symbol, n_symbols = 4, len(vocab) - 4  # ids after the four specials
    examples = []
    for length in rng.integers(min_len, max_len + 1, size=size):
        seq = rng.integers(first_symbol, first_symbol + n_symbols, size=length)
        order = TASKS[task](seq)
        examples.append(Example(seq.tolist(), seq[order].tolist(), order.tolist()))
    return examples
