"""Attention over the encoder memory: masking, softmax and the weighted sum.

:class:`Attention` wraps any registered scorer; :class:`NoAttention` is the
bottleneck baseline with the same call signature, so decoders never branch on
whether they attend.
"""

from typing import NamedTuple, Optional

from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.scorers import SCORERS, build_scorer


class Memory(NamedTuple):
    """What the decoder reads from the encoder, prepared once per batch."""

    values: Tensor  # (B, S, H) encoder outputs
    keys: Tensor  # (B, S, K) scorer-prepared keys
    mask: Tensor  # (B, S) bool, True = real token
    summary: Tensor  # (B, H) fixed-size summary of the source (top layer final state)

    def index_select(self, index: Tensor) -> "Memory":
        """Pick or repeat batch rows (beam expansion). Args: index ``(B',)``."""
        return Memory(*(t.index_select(0, index) for t in self))


class Attention(nn.Module):
    """Global attention (Bahdanau 2015 Eq. 5-6; Luong 2015 Eq. 7) with a pluggable scorer.

    Padded source positions get energy ``-inf`` before the softmax, so their
    weight (and the gradient through them) is exactly 0.
    """

    def __init__(self, scorer: nn.Module) -> None:
        super().__init__()
        self.scorer = scorer

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        """Args: values ``(B, S, H)``, mask ``(B, S)``, summary ``(B, H)``."""
        return Memory(values, self.scorer.prepare_keys(values), mask, summary)

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Optional[Tensor]]:
        """Args: query ``(B, T, D)`` (T=1 for a decoding step).

        Returns: context ``(B, T, H)`` and weights ``(B, T, S)``.
        """
        energies = self.scorer(query, memory.keys)  # (B, T, S)
        energies = energies.masked_fill(~memory.mask.unsqueeze(1), float("-inf"))
        weights = energies.softmax(dim=-1)  # (B, T, S)
        context = weights @ memory.values  # (B, T, H)
        return context, weights


class NoAttention(nn.Module):
    """The no-attention baseline (Cho et al. 2014; Bahdanau's RNNencdec).

    The context at every step is the same fixed-size summary of the source: the
    top encoder layer's final state (both directions). Weights are ``None``.
    """

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        return Memory(values, values, mask, summary)

    def forward(self, query: Tensor, memory: Memory) -> tuple[Tensor, Optional[Tensor]]:
        """Args: query ``(B, T, D)``. Returns context ``(B, T, H)`` and ``None``."""
        context = memory.summary.unsqueeze(1).expand(-1, query.size(1), -1)  # (B, T, H)
        return context, None


def build_attention(name: str, query_size: int, key_size: int, attn_size: Optional[int] = None) -> nn.Module:
    """``"none"`` gives :class:`NoAttention`; any other name a scorer from the registry."""
    if name == "none":
        return NoAttention()
    if name not in SCORERS:
        choices = sorted([*SCORERS, "none"])
        raise ConfigError(f"unknown attention {name!r}: choose one of {choices}")
    return Attention(build_scorer(name, query_size, key_size, attn_size))
