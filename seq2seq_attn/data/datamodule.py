"""LightningDataModules: the shared batching logic and the toy tasks."""

from pathlib import Path
from typing import Literal, Optional, Protocol

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from seq2seq_attn.data.collate import collate
from seq2seq_attn.data.sampler import BucketBatchSampler, ResumableLoader
from seq2seq_attn.data.toy import Example, make_examples, toy_vocab
from seq2seq_attn.data.vocab import Vocab
from seq2seq_attn.errors import ConfigError


class ExampleDataset(Dataset):
    """Items are ``(index, src_ids, trg_ids, alignment_or_None)`` for :func:`collate`."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple:
        ex = self.examples[i]
        return (i, ex.src, ex.trg, ex.alignment)

    @property
    def src_lengths(self) -> list[int]:
        return [len(ex.src) for ex in self.examples]

    @property
    def pair_lengths(self) -> list[int]:
        return [max(len(ex.src), len(ex.trg)) for ex in self.examples]


def check_distributed_sampling(trainer: Optional["pl.Trainer"]) -> None:
    """Our batch sampler shards itself across DDP processes: Lightning must not inject its own."""
    if trainer is not None and trainer.world_size > 1 and trainer._accelerator_connector.use_distributed_sampler:
        raise ConfigError(
            "distributed runs need trainer.use_distributed_sampler: false (the length-bucketed batches are "
            "split across processes by this package): add --config experiments/trainers/ddp.yaml"
        )


class TextSource(Protocol):
    """What a data module of real text offers for evaluation (see ParallelDataModule)."""

    def reference(self, split: str, index: int) -> str: ...

    def source_length(self, split: str, index: int) -> int: ...

    def detokenize(self, tokens: list[str]) -> str: ...


class Seq2SeqDataModule(pl.LightningDataModule):
    """Shared part: vocabularies and length-bucketed loaders.

    Subclasses set ``src_vocab``/``trg_vocab`` in ``__init__`` (the model's sizes
    are linked to them) and fill ``self.datasets[split]`` in ``setup``.
    """

    src_vocab: Vocab
    trg_vocab: Vocab

    def __init__(self, batch_size: int = 64, max_tokens: int = 0, seed: int = 1234, num_workers: int = 0) -> None:
        super().__init__()
        if batch_size < 1 or max_tokens < 0 or num_workers < 0:
            raise ConfigError(
                f"data sizes must be positive: batch_size={batch_size}, max_tokens={max_tokens}, "
                f"num_workers={num_workers}"
            )
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.seed = seed
        self.num_workers = num_workers
        self.datasets: dict[str, ExampleDataset] = {}

    @property
    def src_vocab_size(self) -> int:
        return len(self.src_vocab)

    @property
    def train_max_length(self) -> Optional[int]:
        """The longest training source in buckets' units, where beyond it means extrapolation; None if unknown."""
        return None

    def text_source(self) -> Optional["TextSource"]:
        """Real text for evaluation (raw references, source lengths in words); None for token tasks."""
        return None

    def detokenize(self, tokens: list[str]) -> str:
        """Output tokens as text (a subword model's markers removed by the subclasses that have them)."""
        return " ".join(tokens)

    def tokenizer_json(self) -> Optional[dict[str, str]]:
        """The text tokenizers as JSON, stored in every checkpoint; None for token tasks."""
        return None

    def save_tokenizers(self, folder: Path) -> None:
        """Write the text tokenizers into a run folder; token tasks have none."""

    @property
    def trg_vocab_size(self) -> int:
        return len(self.trg_vocab)

    def loader(self, split: str, shuffle: bool = False) -> DataLoader:
        check_distributed_sampling(getattr(self, "trainer", None))
        if split not in self.datasets:
            self.setup(None)
        dataset = self.datasets[split]
        # training batches group pairs whose longer side is similar: the decoder's step loop runs to the
        # longest target and attention spans the longest source; evaluation groups sources (decoding follows them)
        lengths = dataset.pair_lengths if split == "train" else dataset.src_lengths
        sampler = BucketBatchSampler(lengths, self.batch_size, self.max_tokens, shuffle=shuffle, seed=self.seed)
        loader = ResumableLoader if split == "train" else DataLoader  # training resumes mid-epoch
        # its own generator: starting a pass must not draw from the global one (exact resumes)
        generator = torch.Generator().manual_seed(self.seed)
        return loader(
            dataset, batch_sampler=sampler, collate_fn=collate, num_workers=self.num_workers, generator=generator
        )

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self.loader("test")


class ToyDataModule(Seq2SeqDataModule):
    """Synthetic tasks (copy, reverse, sort) with gold alignments.

    Train, validation and test lengths are separate ranges so length
    extrapolation can be measured: e.g. train on 5-30, test on 5-60.

    Args:
        task: which transformation the target applies to the source.
        num_symbols: size of the symbol alphabet (the vocabulary adds 4 specials).
        train_lengths: inclusive ``[min, max]`` source length for training.
        val_lengths: for validation; defaults to ``train_lengths``.
        test_lengths: for testing; may reach beyond the trained range.
        train_size, val_size, test_size: examples per split.
    """

    def __init__(
        self,
        task: Literal["copy", "reverse", "sort"] = "reverse",
        num_symbols: int = 20,
        train_lengths: tuple[int, int] = (5, 30),
        val_lengths: Optional[tuple[int, int]] = None,
        test_lengths: tuple[int, int] = (5, 60),
        train_size: int = 10000,
        val_size: int = 500,
        test_size: int = 2000,
        batch_size: int = 64,
        max_tokens: int = 0,
        seed: int = 1234,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, max_tokens, seed, num_workers)
        if num_symbols < 2 or min(train_size, val_size, test_size) < 1:
            raise ConfigError(
                f"toy sizes must be positive (num_symbols >= 2): num_symbols={num_symbols}, "
                f"train/val/test_size={train_size}/{val_size}/{test_size}"
            )
        self.task = task
        self.src_vocab = self.trg_vocab = toy_vocab(num_symbols)
        self.splits = {
            "train": (tuple(train_lengths), train_size),
            "val": (tuple(val_lengths or train_lengths), val_size),
            "test": (tuple(test_lengths), test_size),
        }
        for lo, hi in (lengths for lengths, _ in self.splits.values()):
            make_examples(task, self.src_vocab, lo, hi, 0, seed)  # validates early, in one line

    @property
    def train_max_length(self) -> int:
        """Longest training source: test buckets beyond it measure extrapolation."""
        return self.splits["train"][0][1]

    def setup(self, stage: Optional[str] = None) -> None:
        for offset, (split, ((lo, hi), size)) in enumerate(self.splits.items()):
            if split not in self.datasets:
                examples = make_examples(self.task, self.src_vocab, lo, hi, size, self.seed + offset)
                self.datasets[split] = ExampleDataset(examples)
