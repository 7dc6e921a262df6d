"""What attention reads and carries: the encoder memory, the per-sentence attention state, one call's output."""

from typing import NamedTuple, Optional

from torch import Tensor


class Memory(NamedTuple):
    """What the decoder reads from the encoder, prepared once per batch."""

    values: Tensor  # (B, S, H) encoder outputs (multi-head: projected values per head, (B, h, S, d_v))
    keys: Tensor  # (B, S, K) scorer-prepared keys (multi-head: per head, (B, h, S, d_h))
    mask: Tensor  # (B, S) bool, True = real token
    summary: Tensor  # (B, H) fixed-size summary of the source (top layer final state)

    def index_select(self, index: Tensor) -> "Memory":
        """Pick or repeat batch rows (beam expansion). Args: index ``(B',)``."""
        return Memory(*(t.index_select(0, index) for t in self))


class AttentionState(NamedTuple):
    """Per-sentence attention state carried from step to step."""

    step: Tensor  # (B,) target steps taken so far (local-m's aligned position)
    coverage: Optional[Tensor]  # (B, S) the attention weights summed over those steps (coverage models)

    def index_select(self, index: Tensor) -> "AttentionState":
        coverage = None if self.coverage is None else self.coverage.index_select(0, index)
        return AttentionState(self.step.index_select(0, index), coverage)

    def advance(self, weights: Tensor) -> "AttentionState":
        """After attending with ``weights`` ``(B, T, S)``."""
        coverage = None if self.coverage is None else self.coverage + weights.sum(1)  # (B, S)
        return AttentionState(self.step + weights.size(1), coverage)


class AttentionOutput(NamedTuple):
    context: Tensor  # (B, T, H)
    weights: Optional[Tensor]  # (B, T, S); multi-head: the mean over heads; None without attention
    state: Optional[AttentionState]
    head_weights: Optional[Tensor] = None  # (B, heads, T, S) for multi-head attention
    # (B, h, T, S) the energies each head's softmax read, -inf where it may not look (h = 1 for one head):
    # what the saturation metrics measure (seq2seq_attn.metrics.attention_saturation)
    energies: Optional[Tensor] = None
