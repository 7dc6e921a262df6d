"""Attention over the encoder memory: where it may look, masking, softmax and the weighted sum.

:class:`Attention` (global: every source position) wraps any registered scorer; the local
variants of Luong et al. (2015, Sec. 3.2) restrict it to a window around an aligned position,
registered by name in :data:`ALIGNMENTS`; :class:`~seq2seq_attn.modules.multihead.MultiHeadAttention`
splits a multiplicative scorer into heads; :class:`NoAttention` is the bottleneck baseline. All
share one call, ``attention(query, memory, state) -> AttentionOutput``, so decoders never branch on
what kind of attention they have. The state (the target steps taken, and for coverage models the
attention summed so far) travels in the decoder state like the RNN state, through teacher forcing
and through beam reordering.
"""

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.memory import AttentionOutput, AttentionState, Memory
from seq2seq_attn.modules.multihead import MultiHeadAttention
from seq2seq_attn.modules.scorers import SCORE_SCALES, SCORERS, build_scorer

__all__ = ["ALIGNMENTS", "Attention", "AttentionOptions", "AttentionOutput", "AttentionState", "Memory",
           "MultiHeadAttention", "NoAttention", "build_attention"]  # fmt: skip


class Attention(nn.Module):
    """Global attention (Bahdanau 2015 Eq. 5-6; Luong 2015 Eq. 7) with a pluggable scorer.

    Positions a variant rules out (padding, outside a local window) get energy ``-inf`` before the
    softmax, so their weight (and the gradient through them) is exactly 0.
    """

    def __init__(self, scorer: nn.Module) -> None:
        super().__init__()
        self.scorer = scorer

    @classmethod
    def build(cls, scorer: nn.Module, options: "AttentionOptions", query_size: int) -> "Attention":
        return cls(scorer)

    @property
    def sequential(self) -> bool:
        """Whether each step needs the previous steps' weights (coverage): no parallel teacher forcing."""
        return self.scorer.uses_coverage

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        """Args: values ``(B, S, H)``, mask ``(B, S)``, summary ``(B, H)``."""
        return Memory(values, self.scorer.prepare_keys(values), mask, summary)

    def init_state(self, memory: Memory) -> AttentionState:
        batch = memory.mask.size(0)
        coverage = memory.values.new_zeros(memory.mask.shape) if self.scorer.uses_coverage else None  # (B, S)
        return AttentionState(torch.zeros(batch, device=memory.mask.device), coverage)

    def restrict(self, energies: Tensor, query: Tensor, memory: Memory, state: AttentionState) -> Tensor:
        """Energies of the positions this attention may look at; ``-inf`` elsewhere. Global: all real ones."""
        return energies.masked_fill(~memory.mask.unsqueeze(1), float("-inf"))  # (B, T, S)

    def forward(self, query: Tensor, memory: Memory, state: AttentionState) -> AttentionOutput:
        """Args: query ``(B, T, D)`` (T = 1 for a decoding step; T > 1 attends for T steps at once)."""
        if self.scorer.uses_coverage:
            energies = self.scorer(query, memory.keys, state.coverage)  # (B, 1, S)
        else:
            energies = self.scorer(query, memory.keys)  # (B, T, S)
        energies = self.restrict(energies, query, memory, state)  # (B, T, S)
        weights = energies.softmax(dim=-1)  # (B, T, S)
        context = weights @ memory.values  # (B, T, H)
        return AttentionOutput(context, weights, state.advance(weights), energies=energies.unsqueeze(1))


def _positions(memory: Memory) -> Tensor:
    """Source positions ``(1, 1, S)`` as floats."""
    return torch.arange(memory.mask.size(1), device=memory.mask.device, dtype=torch.float).view(1, 1, -1)


class LocalMonotonicAttention(Attention):
    """Luong et al. 2015, Sec. 3.2, local-m: at target step t the aligned position is ``p_t = t``
    (clamped to the sentence's last word), and the softmax runs over the window ``[p_t - D, p_t + D]``
    only. It assumes source and target run in step: a reordering task defeats it."""

    def __init__(self, scorer: nn.Module, window: int) -> None:
        super().__init__(scorer)
        self.window = window

    @classmethod
    def build(cls, scorer: nn.Module, options: "AttentionOptions", query_size: int) -> "Attention":
        return cls(scorer, options.window)

    def aligned(self, query: Tensor, memory: Memory, state: AttentionState) -> Tensor:
        """``p_t`` per sentence and step: ``(B, T)``."""
        steps = state.step.unsqueeze(1) + torch.arange(query.size(1), device=query.device)  # (B, T)
        last = (memory.mask.sum(1, keepdim=True) - 1).float()  # (B, 1) the sentence's last position
        return torch.minimum(steps, last)  # (B, T)

    def prior(self, offset: Tensor) -> Optional[Tensor]:
        """What the window adds to the energies at offset ``s - p_t`` ``(B, T, S)``: nothing for local-m."""
        return None

    def restrict(self, energies: Tensor, query: Tensor, memory: Memory, state: AttentionState) -> Tensor:
        offset = _positions(memory) - self.aligned(query, memory, state).unsqueeze(-1)  # (B, T, S) s - p_t
        inside = (offset.abs() <= self.window) & memory.mask.unsqueeze(1)  # (B, T, S)
        prior = self.prior(offset)
        return (energies if prior is None else energies + prior).masked_fill(~inside, float("-inf"))


class LocalPredictiveAttention(LocalMonotonicAttention):
    """Luong et al. 2015, Sec. 3.2, local-p: the aligned position is predicted from the query,
    ``p_t = (S_x - 1) sigmoid(v_pᵀ tanh(W_p h_t))`` with ``S_x`` the sentence's own length (Luong et al.
    write ``S_x sigmoid(·)``; positions here count from 0, so its last word is ``S_x - 1``), and the window's
    weights are favoured near it: ``a_t(s) ∝ softmax_window(e)(s) exp(-(s - p_t)² / (2σ²))``, σ = D/2.
    (Luong et al. leave the product unnormalised; here it is renormalised to sum to 1, so the context
    stays a weighted average: the same as adding the log Gaussian to the energies.)"""

    def __init__(self, scorer: nn.Module, window: int, query_size: int) -> None:
        super().__init__(scorer, window)
        self.predict = nn.Sequential(nn.Linear(query_size, query_size, bias=False), nn.Tanh())  # tanh(W_p h_t)
        self.v_p = nn.Linear(query_size, 1, bias=False)

    @classmethod
    def build(cls, scorer: nn.Module, options: "AttentionOptions", query_size: int) -> "Attention":
        return cls(scorer, options.window, query_size)

    def aligned(self, query: Tensor, memory: Memory, state: AttentionState) -> Tensor:
        last = memory.mask.sum(1, keepdim=True).float() - 1  # (B, 1) S_x - 1
        return last * torch.sigmoid(self.v_p(self.predict(query)).squeeze(-1))  # (B, T)

    def prior(self, offset: Tensor) -> Tensor:
        """The log Gaussian ``-(s - p_t)² / (2σ²)``, σ = D/2. Args: offset ``(B, T, S)``."""
        return -(offset**2) / (2 * (self.window / 2) ** 2)  # (B, T, S)


class NoAttention(nn.Module):
    """The no-attention baseline (Cho et al. 2014; Bahdanau's RNNencdec).

    The context at every step is the same fixed-size summary of the source: the
    top encoder layer's final state (both directions). Weights are ``None``.
    """

    sequential = False

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        return Memory(values, values, mask, summary)

    def init_state(self, memory: Memory) -> None:
        return None

    def forward(self, query: Tensor, memory: Memory, state: None = None) -> AttentionOutput:
        """Args: query ``(B, T, D)``. Returns the summary as context ``(B, T, H)``, no weights."""
        context = memory.summary.unsqueeze(1).expand(-1, query.size(1), -1)  # (B, T, H)
        return AttentionOutput(context, None, None)


@dataclass(frozen=True)
class AttentionOptions:
    """Everything beyond the scorer's name that shapes the attention (the model's config keys)."""

    attn_size: Optional[int] = None  # A of the additive and concat scorers (default D)
    alignment: str = "global"  # where it may look: a name in ALIGNMENTS
    window: int = 10  # D of the local alignments: the window is [p_t - D, p_t + D]
    heads: int = 1  # multi-head attention for the multiplicative scorers
    coverage: bool = False  # the attention summed so far enters the energy (additive, concat)
    max_source_length: int = 100  # rows of the location scorer
    score_scale: str = "none"  # "sqrt_d": dot and general energies divided by sqrt(D) (heads > 1: always)


# where attention may look, by config name (``model.alignment``)
ALIGNMENTS: dict[str, type[Attention]] = {
    "global": Attention,
    "local-m": LocalMonotonicAttention,
    "local-p": LocalPredictiveAttention,
}


def _check(name: str, options: AttentionOptions) -> None:
    """The combinations that do not exist, each in one line naming the valid ones."""
    if options.score_scale not in SCORE_SCALES:
        raise ConfigError(f"unknown score_scale {options.score_scale!r}: choose one of {list(SCORE_SCALES)}")
    if options.alignment not in ALIGNMENTS:
        raise ConfigError(f"unknown alignment {options.alignment!r}: choose one of {sorted(ALIGNMENTS)}")
    if name == "none" and (options.alignment != "global" or options.heads > 1 or options.coverage):
        raise ConfigError(
            "attention 'none' (the bottleneck) has no alignment, heads or coverage: drop them or pick a scorer"
        )
    if options.alignment != "global" and options.window < 1:
        raise ConfigError(f"window must be >= 1 for alignment {options.alignment!r}, got {options.window}")
    if options.heads > 1 and (options.alignment != "global" or options.coverage):
        raise ConfigError("multi-head attention goes with alignment 'global' and no coverage: set heads: 1 or those")


def build_attention(
    name: str, query_size: int, key_size: int, options: AttentionOptions = AttentionOptions()
) -> nn.Module:
    """``"none"`` gives :class:`NoAttention`; any other name a scorer from the registry, aligned and
    split into heads as ``options`` say."""
    _check(name, options)
    if name == "none":
        return NoAttention()
    if name not in SCORERS:
        choices = sorted([*SCORERS, "none"])
        raise ConfigError(f"unknown attention {name!r}: choose one of {choices}")
    if options.heads > 1:
        return MultiHeadAttention(name, query_size, key_size, options.heads)
    scorer = build_scorer(name, query_size, key_size, options.attn_size, options.coverage, options.max_source_length,
                          options.score_scale)  # fmt: skip
    return ALIGNMENTS[options.alignment].build(scorer, options, query_size)
