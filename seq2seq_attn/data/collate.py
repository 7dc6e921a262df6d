"""Batches of id sequences: padding, BOS/EOS, lengths and gold alignments."""

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from seq2seq_attn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_attn.errors import ConfigError


@dataclass
class Batch:
    src: Tensor  # (B, S) source ids, PAD after each sentence
    src_lengths: Tensor  # (B,) all >= 1
    trg_in: Tensor  # (B, T) BOS + target
    trg_out: Tensor  # (B, T) target + EOS, PAD after
    alignment: Optional[Tensor]  # (B, T) gold source position per target step, -1 for none
    index: Tensor  # (B,) position of each example in its dataset

    @property
    def src_mask(self) -> Tensor:
        """``(B, S)`` bool, True = real token."""
        return torch.arange(self.src.size(1)).to(self.src.device) < self.src_lengths.unsqueeze(1)

    def __len__(self) -> int:
        return self.src.size(0)


def pad(seqs: Sequence[Sequence[int]], value: int) -> Tensor:
    """Right-pad to the longest sequence. Returns ``(B, max_len)``."""
    tensors = [torch.as_tensor(s, dtype=torch.long) for s in seqs]
    return pad_sequence(tensors, batch_first=True, padding_value=value)  # (B, max_len)


def collate(items: Sequence[tuple]) -> Batch:
    """Items are ``(index, src_ids, trg_ids, alignment_or_None)``."""
    index, srcs, trgs, aligns = zip(*items)
    if any(len(s) == 0 for s in srcs):
        raise ConfigError("an empty source sentence reached a batch: filter empty lines first")
    alignment = None
    if aligns[0] is not None:
        alignment = pad([list(a) + [-1] for a in aligns], -1)  # (B, T)
    return Batch(
        src=pad(srcs, PAD_ID),
        src_lengths=torch.tensor([len(s) for s in srcs]),
        trg_in=pad([[BOS_ID, *t] for t in trgs], PAD_ID),
        trg_out=pad([[*t, EOS_ID] for t in trgs], PAD_ID),
        alignment=alignment,
        index=torch.tensor(index),
    )
