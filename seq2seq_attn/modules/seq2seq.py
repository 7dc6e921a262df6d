"""The encoder-decoder model and its builder."""

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from seq2seq_attn.modules.attention import AttentionOptions, Memory, build_attention
from seq2seq_attn.modules.decoder import DecoderSizes, DecoderState, RNNDecoder, build_decoder
from seq2seq_attn.modules.encoder import RNNEncoder
from seq2seq_attn.modules.rnn import Bridge, top_hidden


class StepResult(NamedTuple):
    log_probs: Tensor  # (B, V)
    state: DecoderState
    weights: Optional[Tensor]  # (B, S), None without attention


class Seq2SeqOutput(NamedTuple):
    logits: Tensor  # (B, T, V), or (N, V) for the selected positions
    weights: Optional[Tensor]  # (B, T, S), None without attention
    energies: Optional[Tensor] = None  # (B, h, T, S) each head's masked energies, None where not kept


def source_mask(src_lengths: Tensor, max_len: int) -> Tensor:
    """Args: src_lengths ``(B,)``. Returns ``(B, S)`` bool, True = real token."""
    positions = torch.arange(max_len, device=src_lengths.device)  # (S,)
    return positions.unsqueeze(0) < src_lengths.unsqueeze(1)  # (B, S)


class Seq2Seq(nn.Module):
    """Encoder -> bridge -> decoder, with named entry points for training and search."""

    def __init__(self, encoder: RNNEncoder, bridge: Bridge, decoder: RNNDecoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.bridge = bridge
        self.decoder = decoder

    def encode(self, src: Tensor, src_lengths: Tensor) -> tuple[Memory, DecoderState]:
        """Args: src ``(B, S)``, src_lengths ``(B,)``. Everything computed once per batch."""
        enc = self.encoder(src, src_lengths)
        mask = source_mask(src_lengths, src.size(1))  # (B, S)
        summary = top_hidden(enc.final)  # (B, H)
        memory = self.decoder.attention.prepare(enc.memory, mask, summary)
        state = self.decoder.init_state(self.bridge(enc.final), memory)
        return memory, state

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, memory: Memory) -> StepResult:
        """One search step. Args: prev_tokens ``(B,)`` the tokens chosen last step."""
        emb = self.decoder.embed(prev_tokens.unsqueeze(1))  # (B, 1, E)
        out = self.decoder.step(emb, state, memory)
        log_probs = self.decoder.logits(out.features).squeeze(1).log_softmax(-1)  # (B, V)
        weights = None if out.weights is None else out.weights.squeeze(1)  # (B, S)
        return StepResult(log_probs, out.state, weights)

    def forward(
        self, src: Tensor, src_lengths: Tensor, trg_in: Tensor, select: Optional[Tensor] = None
    ) -> Seq2SeqOutput:
        """Teacher forcing. Args: src ``(B, S)``, src_lengths ``(B,)``, trg_in ``(B, T)``;
        select ``(B, T)`` bool: output logits ``(N, V)`` for those positions only (training skips padding)."""
        memory, state = self.encode(src, src_lengths)
        out = self.decoder(trg_in, state, memory, select)  # (B, T, V) or (N, V), (B, T, S), (B, h, T, S)
        return Seq2SeqOutput(out.logits, out.weights, out.energies)


def build_seq2seq(
    src_vocab_size: int,
    trg_vocab_size: int,
    *,
    attention: str = "additive",
    flow: str = "bahdanau",
    cell: str = "gru",
    emb_size: int = 64,
    hidden_size: int = 64,
    dec_hidden_size: Optional[int] = None,
    num_layers: int = 1,
    bidirectional: bool = True,
    dropout: float = 0.0,
    input_feed: bool = True,
    attn_size: Optional[int] = None,
    alignment: str = "global",
    window: int = 10,
    heads: int = 1,
    coverage: bool = False,
    max_source_length: int = 100,
    score_scale: str = "none",
    pad_id: int = 0,
) -> Seq2Seq:
    """Build a model from names and sizes.

    Args:
        hidden_size: encoder hidden size per direction, so ``H = hidden_size * dirs``.
        dec_hidden_size: decoder hidden size D; defaults to H (which ``dot`` needs).
        attn_size: A for the ``additive`` and ``concat`` scorers; defaults to D.
        alignment, window, heads, coverage, max_source_length, score_scale: see
            :class:`~seq2seq_attn.modules.attention.AttentionOptions`.
    """
    encoder = RNNEncoder(cell, src_vocab_size, emb_size, hidden_size, num_layers, bidirectional, dropout, pad_id)
    memory_size = encoder.output_size  # H
    dec_size = dec_hidden_size or memory_size  # D
    options = AttentionOptions(attn_size, alignment, window, heads, coverage, max_source_length, score_scale)
    attn = build_attention(attention, dec_size, memory_size, options)
    sizes = DecoderSizes(trg_vocab_size, emb_size, dec_size, memory_size, num_layers)
    decoder = build_decoder(flow, cell, sizes, attn, dropout, input_feed)
    return Seq2Seq(encoder, Bridge(cell, memory_size, dec_size), decoder)
