"""Multi-head cross-attention on the RNN decoder (Vaswani et al. 2017, Sec. 3.2.2).

Queries, keys and values are projected (``W_q``, ``W_k``, ``W_v``) and split into h heads; each head
scores with the configured multiplicative scorer, per head: ``dot`` ``q_iᵀ k_i``, ``scaled_dot``
``q_iᵀ k_i / sqrt(d_h)``, ``general`` ``q_iᵀ W_i k_i`` with a bilinear ``W_i`` of its own; the heads'
contexts are concatenated and projected (``W_o``): the computation of
``torch.nn.functional.scaled_dot_product_attention``, written out so that the weights come back for
the metrics and heatmaps (the mean over heads; each head's in ``head_weights``). ``heads: 1`` is not
this class but the plain scorer (:class:`~seq2seq_attn.modules.attention.Attention`).
"""

import math

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.memory import AttentionOutput, AttentionState, Memory

MULTIPLICATIVE = ("dot", "general", "scaled_dot")


class MultiHeadAttention(nn.Module):
    """Args: scorer ``dot``, ``general`` or ``scaled_dot``; query_size D; key_size H; heads h (dividing D and H)."""

    sequential = False

    def __init__(self, scorer: str, query_size: int, key_size: int, heads: int) -> None:
        super().__init__()
        if scorer not in MULTIPLICATIVE:
            raise ConfigError(f"heads > 1 goes with the multiplicative scorers {list(MULTIPLICATIVE)}, not {scorer!r}")
        if query_size % heads or key_size % heads:
            raise ConfigError(f"heads must divide the decoder size {query_size} and the encoder output {key_size}")
        self.heads, self.scorer_name = heads, scorer
        self.query_proj = nn.Linear(query_size, query_size, bias=False)  # W_q: D -> h x d_h
        self.key_proj = nn.Linear(key_size, query_size, bias=False)  # W_k: H -> h x d_h
        self.value_proj = nn.Linear(key_size, key_size, bias=False)  # W_v: H -> h x d_v
        self.out_proj = nn.Linear(key_size, key_size, bias=False)  # W_o
        head_size = query_size // heads
        self.bilinear = nn.Parameter(torch.eye(head_size).repeat(heads, 1, 1)) if scorer == "general" else None
        self.scale = 1 / math.sqrt(head_size) if scorer == "scaled_dot" else 1.0

    def _split(self, x: Tensor) -> Tensor:
        """``(B, N, h * d) -> (B, h, N, d)``."""
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        """Keys and values projected and split into heads once per batch (``general``: ``W_i k`` too):
        keys ``(B, h, S, d_h)``, values ``(B, h, S, d_v)``."""
        keys = self._split(self.key_proj(values))  # (B, h, S, d_h)
        if self.bilinear is not None:
            keys = keys @ self.bilinear.transpose(1, 2).unsqueeze(0)  # (B, h, S, d_h): W_i k per head
        return Memory(self._split(self.value_proj(values)), keys, mask, summary)

    def init_state(self, memory: Memory) -> AttentionState:
        return AttentionState(torch.zeros(memory.mask.size(0), device=memory.mask.device), None)

    def forward(self, query: Tensor, memory: Memory, state: AttentionState) -> AttentionOutput:
        q = self._split(self.query_proj(query))  # (B, h, T, d_h)
        k, v = memory.keys, memory.values  # (B, h, S, d_h), (B, h, S, d_v)
        energies = (q @ k.transpose(-1, -2)) * self.scale  # (B, h, T, S)
        energies = energies.masked_fill(~memory.mask[:, None, None, :], float("-inf"))
        head_weights = energies.softmax(dim=-1)  # (B, h, T, S)
        context = (head_weights @ v).transpose(1, 2).flatten(2)  # (B, h, T, d_v) -> (B, T, H)
        weights = head_weights.mean(1)  # (B, T, S)
        return AttentionOutput(self.out_proj(context), weights, state.advance(weights), head_weights, energies)
