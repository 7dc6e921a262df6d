"""A Transformer encoder-decoder (Vaswani et al. 2017) behind the same interface as the RNN models.

``encode``, ``decode_step`` and the teacher-forced ``forward`` are those of
:class:`~seq2seq_attn.modules.seq2seq.Seq2Seq`, so training, search, evaluation, checkpoints,
int8 decoding and the ablation runner treat both alike. Self- and cross-attention are multi-head
scaled dot-product attention (``torch.nn.functional.scaled_dot_product_attention`` where no weights
are needed; the last decoder layer's cross-attention written out, so that its weights, averaged over
heads, feed the heatmaps, alignment accuracy and attention entropy like an RNN model's).

Decoding is incremental: each decoder layer keeps the keys and values of the target positions so
far (:class:`TransformerState`), so a step computes one new position only; the cross-attention keys
and values of every layer are projected once per batch (:class:`TransformerMemory`).
"""

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.dropout import Dropout
from seq2seq_attn.modules.rotary import Rotary
from seq2seq_attn.modules.seq2seq import Seq2SeqOutput, StepResult


class TransformerMemory(NamedTuple):
    """The encoded source, prepared once per batch."""

    keys: tuple[Tensor, ...]  # per decoder layer, cross-attention keys (B, h, S, d_h)
    values: tuple[Tensor, ...]  # per decoder layer, cross-attention values (B, h, S, d_h)
    mask: Tensor  # (B, S) bool, True = real token

    def index_select(self, index: Tensor) -> "TransformerMemory":
        pick = lambda ts: tuple(t.index_select(0, index) for t in ts)  # noqa: E731
        return TransformerMemory(pick(self.keys), pick(self.values), self.mask.index_select(0, index))


class TransformerState(NamedTuple):
    """Per decoder layer, the self-attention keys and values of the target positions so far."""

    keys: tuple[Tensor, ...]  # (B, h, t, d_h) each
    values: tuple[Tensor, ...]  # (B, h, t, d_h) each
    step: int  # t, the position of the next token

    def index_select(self, index: Tensor) -> "TransformerState":
        pick = lambda ts: tuple(t.index_select(0, index) for t in ts)  # noqa: E731
        return TransformerState(pick(self.keys), pick(self.values), self.step)


def sinusoids(positions: int, size: int) -> Tensor:
    """Vaswani et al. 2017, Sec. 3.5: ``(positions, size)`` sines and cosines of geometric wavelengths."""
    position = torch.arange(positions, dtype=torch.float).unsqueeze(1)  # (P, 1)
    rate = torch.exp(torch.arange(0, size, 2, dtype=torch.float) * (-math.log(10000.0) / size))  # (size/2,)
    table = torch.zeros(positions, size)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
    return table


POSITIONS = ("learned", "rotary", "sinusoidal")


class Embedding(nn.Module):
    """Token embedding × sqrt(d) + position (sinusoidal, or learned up to ``max_positions``; later
    positions reuse the last learned one; none with ``rotary``, whose positions enter self-attention),
    then dropout."""

    def __init__(self, vocab: int, size: int, positions: str, max_positions: int, dropout: float, pad_id: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, size, padding_idx=pad_id)
        nn.init.normal_(self.tokens.weight, std=size**-0.5)
        self.learned = nn.Embedding(max_positions, size) if positions == "learned" else None
        self.register_buffer("table", sinusoids(4096, size) if positions == "sinusoidal" else None, persistent=False)
        self.scale, self.dropout = math.sqrt(size), Dropout(dropout)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """Args: tokens ``(B, T)`` at positions ``start..start+T-1``. Returns ``(B, T, d)``."""
        x = self.tokens(tokens) * self.scale  # (B, T, d)
        where = torch.arange(start, start + tokens.size(1), device=tokens.device)  # (T,)
        if self.learned is not None:
            x = x + self.learned(where.clamp(max=self.learned.num_embeddings - 1))  # (T, d) broadcast
        elif self.table is not None:
            x = x + self.table[where]  # (T, d) broadcast
        return self.dropout(x)


class MultiHead(nn.Module):
    """Multi-head scaled dot-product attention; ``need_weights`` also returns the mean over heads.
    ``rotary`` (self-attention only) rotates queries and keys by their positions."""

    def __init__(self, size: int, heads: int, dropout: float, rotary: Optional[Rotary] = None) -> None:
        super().__init__()
        self.heads, self.dropout, self.rotary = heads, dropout, rotary
        self.query, self.key, self.value, self.out = (nn.Linear(size, size) for _ in range(4))

    def split(self, x: Tensor) -> Tensor:
        """``(B, N, d) -> (B, h, N, d_h)``."""
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def project(self, h: Tensor, start: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries, keys and values of ``h`` ``(B, N, d)`` at positions ``start..``:
        three ``(B, h, N, d_h)``, queries and keys rotated where positions are rotary."""
        q, k, v = self.split(self.query(h)), self.split(self.key(h)), self.split(self.value(h))
        if self.rotary is not None:
            q, k = self.rotary(q, start), self.rotary(k, start)
        return q, k, v

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], need_weights: bool = False):
        """Args: q ``(B, h, T, d_h)``, k/v ``(B, h, N, d_h)``, mask ``(B, 1, T|1, N)`` bool (True = may attend).
        Returns the context ``(B, T, d)`` and the weights ``(B, T, N)`` (mean over heads) or None."""
        p = self.dropout if self.training else 0.0
        if need_weights:
            energies = (q @ k.transpose(-1, -2)) / math.sqrt(q.size(-1))  # (B, h, T, N)
            weights = energies.masked_fill(~mask, float("-inf")).softmax(-1)  # (B, h, T, N)
            context = F.dropout(weights, p, self.training) @ v  # (B, h, T, d_h)
            mean = weights.mean(1)  # (B, T, N)
        else:
            context, mean = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), None
        return self.out(context.transpose(1, 2).flatten(2)), mean  # (B, T, d)


class FeedForward(nn.Sequential):
    def __init__(self, size: int, hidden: int, dropout: float) -> None:
        super().__init__(nn.Linear(size, hidden), nn.ReLU(), Dropout(dropout), nn.Linear(hidden, size))


class Sublayer(nn.Module):
    """A residual sublayer with its LayerNorm before (pre-norm) or after the residual sum (post-norm)."""

    def __init__(self, size: int, norm: str, dropout: float) -> None:
        super().__init__()
        self.norm, self.pre, self.dropout = nn.LayerNorm(size), norm == "pre", Dropout(dropout)

    def forward(self, x: Tensor, fn) -> tuple[Tensor, Optional[Tensor]]:
        out, weights = fn(self.norm(x) if self.pre else x)
        y = x + self.dropout(out)
        return (y if self.pre else self.norm(y)), weights


class EncoderLayer(nn.Module):
    def __init__(self, size: int, heads: int, ffn: int, norm: str, dropout: float, rotary: Optional[Rotary]):
        super().__init__()
        self.attention, self.ffn = MultiHead(size, heads, dropout, rotary), FeedForward(size, ffn, dropout)
        self.sub_attention, self.sub_ffn = Sublayer(size, norm, dropout), Sublayer(size, norm, dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """Args: x ``(B, S, d)``, mask ``(B, 1, 1, S)``."""
        att = self.attention

        def attend(h: Tensor):
            return att(*att.project(h), mask)

        x, _ = self.sub_attention(x, attend)
        return self.sub_ffn(x, lambda h: (self.ffn(h), None))[0]


class DecoderLayer(nn.Module):
    def __init__(self, size: int, heads: int, ffn: int, norm: str, dropout: float, rotary: Optional[Rotary]):
        super().__init__()
        self.self_attention, self.cross = MultiHead(size, heads, dropout, rotary), MultiHead(size, heads, dropout)
        self.ffn = FeedForward(size, ffn, dropout)
        self.subs = nn.ModuleList(Sublayer(size, norm, dropout) for _ in range(3))

    def forward(self, x, past_k, past_v, causal, cross_k, cross_v, cross_mask, need_weights):
        """Args: x ``(B, T, d)`` new positions; past_k/v ``(B, h, t, d_h)``; causal ``(1, 1, T, t+T)``.
        Returns the output ``(B, T, d)``, this layer's keys/values of all ``t+T`` positions, cross weights."""
        att, keys = self.self_attention, {}

        def self_attend(h: Tensor):
            q, k, v = att.project(h, start=past_k.size(2))  # (B, h, T, d_h) each, at positions t..t+T-1
            keys["k"], keys["v"] = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # (B, h, t+T, d_h)
            return att(q, keys["k"], keys["v"], causal)

        x, _ = self.subs[0](x, self_attend)
        cross = self.cross
        x, weights = self.subs[1](
            x, lambda h: cross(cross.split(cross.query(h)), cross_k, cross_v, cross_mask, need_weights)
        )
        x, _ = self.subs[2](x, lambda h: (self.ffn(h), None))
        return x, keys["k"], keys["v"], weights


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Args: sizes d (``size``), heads, layers (each side), ffn; positions
    ``sinusoidal`` or ``learned`` (absolute, added to the embeddings) or ``rotary`` (relative, in encoder
    and decoder self-attention; cross-attention has no positions); norm ``pre`` or ``post``; tie: the
    output layer shares the target embeddings."""

    def __init__(self, src_vocab: int, trg_vocab: int, size: int = 256, heads: int = 4, layers: int = 3,
                 ffn: int = 1024, dropout: float = 0.1, positions: str = "sinusoidal", norm: str = "pre",
                 tie: bool = False, max_positions: int = 256, pad_id: int = 0) -> None:  # fmt: skip
        super().__init__()
        self.heads, self.pre = heads, norm == "pre"
        self.src_embed = Embedding(src_vocab, size, positions, max_positions, dropout, pad_id)
        self.trg_embed = Embedding(trg_vocab, size, positions, max_positions, dropout, pad_id)
        rotary = Rotary(size // heads) if positions == "rotary" else None  # one table, shared by every layer
        self.encoder = nn.ModuleList(EncoderLayer(size, heads, ffn, norm, dropout, rotary) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(size, heads, ffn, norm, dropout, rotary) for _ in range(layers))
        self.enc_norm, self.dec_norm = (nn.LayerNorm(size) if self.pre else nn.Identity() for _ in range(2))
        self.output = nn.Linear(size, trg_vocab)
        if tie:
            self.output.weight = self.trg_embed.tokens.weight

    def encode(self, src: Tensor, src_lengths: Tensor) -> tuple[TransformerMemory, TransformerState]:
        """Args: src ``(B, S)``, src_lengths ``(B,)``. Everything computed once per batch."""
        mask = torch.arange(src.size(1), device=src.device).unsqueeze(0) < src_lengths.unsqueeze(1)  # (B, S)
        x = self.src_embed(src)  # (B, S, d)
        for layer in self.encoder:
            x = layer(x, mask[:, None, None, :])
        x = self.enc_norm(x)
        keys = tuple(layer.cross.split(layer.cross.key(x)) for layer in self.decoder)  # (B, h, S, d_h) each
        values = tuple(layer.cross.split(layer.cross.value(x)) for layer in self.decoder)
        empty = (x.new_zeros(x.size(0), self.heads, 0, x.size(-1) // self.heads),) * len(self.decoder)  # (B, h, 0, d_h)
        return TransformerMemory(keys, values, mask), TransformerState(empty, empty, 0)

    def decode(self, tokens: Tensor, state: TransformerState, memory: TransformerMemory):
        """Decoder over new target positions. Args: tokens ``(B, T)``. Returns features ``(B, T, d)``,
        the new state and the last layer's cross-attention weights ``(B, T, S)``."""
        x = self.trg_embed(tokens, state.step)  # (B, T, d)
        t, new = state.step, tokens.size(1)
        causal = torch.ones(new, t + new, dtype=torch.bool, device=tokens.device).tril(t)[None, None]  # (1,1,T,t+T)
        cross_mask = memory.mask[:, None, None, :]  # (B, 1, 1, S)
        keys, values, weights = [], [], None
        for i, layer in enumerate(self.decoder):
            last = i == len(self.decoder) - 1
            cross = (memory.keys[i], memory.values[i], cross_mask)
            x, k, v, w = layer(x, state.keys[i], state.values[i], causal, *cross, need_weights=last)
            keys.append(k)
            values.append(v)
            weights = w if last else weights
        return self.dec_norm(x), TransformerState(tuple(keys), tuple(values), t + new), weights

    def decode_step(self, prev_tokens: Tensor, state: TransformerState, memory: TransformerMemory):
        """One search step. Args: prev_tokens ``(B,)``."""
        features, state, weights = self.decode(prev_tokens.unsqueeze(1), state, memory)
        log_probs = self.output(features).squeeze(1).log_softmax(-1)  # (B, V)
        return StepResult(log_probs, state, weights.squeeze(1))

    def forward(self, src: Tensor, src_lengths: Tensor, trg_in: Tensor, select: Optional[Tensor] = None):
        """Teacher forcing, all target positions at once under the causal mask. Args as :class:`Seq2Seq`."""
        memory, state = self.encode(src, src_lengths)
        features, _, weights = self.decode(trg_in, state, memory)  # (B, T, d), (B, T, S)
        if select is not None:
            features = features.flatten(0, 1).index_select(0, select.flatten().nonzero().squeeze(1))  # (N, d)
        return Seq2SeqOutput(self.output(features), weights)


def build_transformer(
    src_vocab_size: int,
    trg_vocab_size: int,
    *,
    size: int,
    heads: int,
    layers: int,
    ffn_size: int,
    dropout: float,
    positions: str,
    norm: str,
    tie_embeddings: bool,
    max_positions: int,
    pad_id: int = 0,
) -> Transformer:
    """The Transformer of ``arch: transformer``, with one-line errors for impossible sizes and names."""
    if size % heads:
        raise ConfigError(f"heads ({heads}) must divide the model size emb_size ({size}) for arch 'transformer'")
    if positions not in POSITIONS:
        raise ConfigError(f"unknown positions {positions!r}: choose one of {list(POSITIONS)}")
    if norm not in ("pre", "post"):
        raise ConfigError(f"unknown norm {norm!r}: choose one of ['post', 'pre']")
    return Transformer(src_vocab_size, trg_vocab_size, size, heads, layers, ffn_size, dropout, positions, norm,
                       tie_embeddings, max_positions, pad_id)  # fmt: skip
