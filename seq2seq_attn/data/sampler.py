"""Length-bucketed batching (similar lengths together, batch order shuffled) that resumes mid-epoch."""

import math
from typing import Iterator, Optional, Sequence

import numpy as np
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler


class BucketBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices.

    Indices are shuffled, cut into pools of ``pool_batches`` batches, sorted by
    length inside each pool and cut into batches, whose order is shuffled. A
    batch holds at most ``batch_size`` sentences, or, when ``max_tokens`` > 0,
    at most that many padded source tokens. Without ``shuffle`` the batches
    follow length order, which is the cheapest for evaluation. The permutation
    depends only on ``seed`` and the epoch (Lightning calls ``set_epoch``), so a
    resumed run sees the same batches. Under DDP each process takes its share of
    the batches itself (run with ``trainer.use_distributed_sampler: false``).
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
        self.skip = 0  # batches of this epoch to leave out (set when resuming mid-epoch)

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

    def _shard(self) -> list[list[int]]:
        """This process's batches: under DDP every rank takes every R-th batch, padded to equal counts
        (the padding repeats early batches; evaluation counts each example once by its index)."""
        batches = self._batches()
        ranks, rank = _world()
        if ranks == 1:
            return batches
        per_rank = math.ceil(len(batches) / ranks)
        padded = batches + batches[: per_rank * ranks - len(batches)]
        return padded[rank::ranks]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._shard()[self.skip :])

    def __len__(self) -> int:
        return len(self._shard())


def _world() -> tuple[int, int]:
    """(number of processes, this one's rank) of the running DDP job; (1, 0) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class ResumableLoader(DataLoader):
    """A DataLoader over a :class:`BucketBatchSampler` that can resume in the middle of an epoch.

    Lightning stores ``state_dict()`` in every checkpoint and hands it back through
    ``load_state_dict`` when a run resumes (its stateful-loader interface). The
    next pass over the loader then skips the batches of that epoch that were
    already trained on; the batch order itself depends only on the seed and the
    epoch, so the resumed run sees exactly the batches the interrupted one would have.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._consumed = 0  # batches handed out in the current pass
        self._resume_at: Optional[dict] = None

    def state_dict(self) -> dict:
        return {"epoch": self.batch_sampler.epoch, "consumed": self._consumed}

    def load_state_dict(self, state: dict) -> None:
        self._resume_at = dict(state)

    def __iter__(self) -> Iterator:
        # a generator: nothing runs until the first batch is asked for, after Lightning's set_epoch
        resume, self._resume_at = self._resume_at, None
        skip = resume["consumed"] if resume and resume["epoch"] == self.batch_sampler.epoch else 0
        self.batch_sampler.skip = skip
        self._consumed = skip
        try:
            for batch in super().__iter__():
                self._consumed += 1
                yield batch
        finally:
            self.batch_sampler.skip = 0
