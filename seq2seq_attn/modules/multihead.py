"""Multi-head cross-attention on the RNN decoder (Vaswani et al. 2017, Sec. 3.2.2).

Queries, keys and values are projected (``W_q``, ``W_k``, ``W_v``) and split into h heads of size
``d_h = D / h``; head i scores ``q_iᵀ k_i / sqrt(d_h)``, i.e. the bilinear form ``W_q,iᵀ W_k,i`` between
the decoder state and the encoder output, scaled so that the energies stay near unit scale while the
projections grow (without the scale, Adam at lr 1e-3 drove the energies of a 4-head model on real text
to hundreds of nats within a few hundred updates: one-hot rows that pass no gradient). The heads'
contexts are concatenated and projected (``W_o``). This is the function of
``torch.nn.MultiheadAttention`` without biases (a test copies the weights across and compares), written
out so that each head's weights and energies come back for the metrics and heatmaps. ``dot``,
``general`` and ``scaled_dot`` all name this one computation when ``heads > 1``: with learned
``W_q`` and ``W_k`` per head, a further bilinear ``W_i`` (general) adds no function, and the scale is
what every head needs. ``heads: 1`` is not this class but the plain scorer
(:class:`~seq2seq_attn.modules.attention.Attention`), where ``model.score_scale`` chooses Luong's
unscaled scores or the scaled ones.
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
        # 1 / sqrt(d_h), kept in the state dict: a checkpoint of heads that scored unscaled lacks it
        # and fails to load in one line (Seq2SeqLitModule.load_state_dict) instead of scoring differently
        self.register_buffer("head_scale", torch.tensor(1 / math.sqrt(query_size // heads), dtype=torch.float64))

    def _split(self, x: Tensor) -> Tensor:
        """``(B, N, h * d) -> (B, h, N, d)``."""
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def prepare(self, values: Tensor, mask: Tensor, summary: Tensor) -> Memory:
        """Keys and values projected and split into heads once per batch: keys ``(B, h, S, d_h)``, values
        ``(B, h, S, d_v)``."""
        return Memory(self._split(self.value_proj(values)), self._split(self.key_proj(values)), mask, summary)

    def init_state(self, memory: Memory) -> AttentionState:
        return AttentionState(torch.zeros(memory.mask.size(0), device=memory.mask.device), None)

    def forward(self, query: Tensor, memory: Memory, state: AttentionState) -> AttentionOutput:
        q = self._split(self.query_proj(query)) * self.head_scale  # (B, h, T, d_h), scaled before the product
        k, v = memory.keys, memory.values  # (B, h, S, d_h), (B, h, S, d_v)
        energies = (q @ k.transpose(-1, -2)).masked_fill(~memory.mask[:, None, None, :], float("-inf"))  # (B, h, T, S)
        head_weights = energies.softmax(dim=-1)  # (B, h, T, S)
        context = (head_weights @ v).transpose(1, 2).flatten(2)  # (B, h, T, d_v) -> (B, T, H)
        weights = head_weights.mean(1)  # (B, T, S)
        return AttentionOutput(self.out_proj(context), weights, state.advance(weights), head_weights, energies)
