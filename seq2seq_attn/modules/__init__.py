"""Model parts in plain PyTorch (no Lightning): scorers, attention, encoder, decoders."""

from seq2seq_attn.modules.attention import Attention, Memory, NoAttention, build_attention
from seq2seq_attn.modules.decoder import DECODERS, DecoderState, RNNDecoder, build_decoder
from seq2seq_attn.modules.encoder import RNNEncoder
from seq2seq_attn.modules.rnn import CELLS
from seq2seq_attn.modules.scorers import SCORERS, Scorer, build_scorer, register_scorer
from seq2seq_attn.modules.seq2seq import Seq2Seq, build_seq2seq

__all__ = [
    "Attention",
    "Memory",
    "NoAttention",
    "build_attention",
    "DECODERS",
    "DecoderState",
    "RNNDecoder",
    "build_decoder",
    "RNNEncoder",
    "CELLS",
    "SCORERS",
    "Scorer",
    "build_scorer",
    "register_scorer",
    "Seq2Seq",
    "build_seq2seq",
]
