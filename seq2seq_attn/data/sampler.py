"""Length-bucketed batching: similar lengths together, batch order shuffled."""

from typing import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices.

    Indices are shuffled, cut into pools of ``pool_batches`` batches, sorted by
    length inside each pool and cut into batches, whose order is shuffled. A
    batch holds at most ``batch_size`` sentences, or, when ``max_tokens`` > 0,
    at most that many padded source tokens. Without ``shuffle`` the batches
    follow length order, which is the cheapest for evaluation. The permutation
    depends only on ``seed`` and the epoch (Lightning calls ``set_epoch``), so a
    resumed run sees the same batches.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        max_tokens: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 50,
    ) -> None:
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        pool = len(order) if not self.shuffle else self.batch_size * self.pool_batches
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start : start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches.extend(self._cut(chunk))
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _cut(self, sorted_idx: np.ndarray) -> list[list[int]]:
        batches, current, longest = [], [], 0
        for i in sorted_idx.tolist():
            longest_if_added = max(longest, int(self.lengths[i]))
            too_many_tokens = self.max_tokens > 0 and longest_if_added * (len(current) + 1) > self.max_tokens
            if current and (len(current) >= self.batch_size or too_many_tokens):
                batches.append(current)
                current, longest_if_added = [], int(self.lengths[i])
            current.append(i)
            longest = longest_if_added
        if current:
            batches.append(current)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())
