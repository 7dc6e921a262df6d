"""The RNN encoder: embeddings, a (bi)GRU/LSTM over packed sequences."""

from typing import NamedTuple

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq_attn.modules.dropout import Dropout
from seq2seq_attn.modules.rnn import RNNState, make_rnn, map_state, merge_directions


class EncoderOutput(NamedTuple):
    memory: Tensor  # (B, S, H) outputs at every source position, zero on padding
    final: RNNState  # (L, B, H) final state per layer, both directions concatenated


class RNNEncoder(nn.Module):
    """Embedding -> dropout -> GRU/LSTM (``num_layers``, uni- or bidirectional).

    ``H = hidden_size * (2 if bidirectional else 1)``. Padding never reaches the
    RNN (packed sequences), so outputs and final states do not depend on how
    much padding a batch carries.
    """

    def __init__(
        self,
        cell: str,
        vocab_size: int,
        emb_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = True,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.output_size = hidden_size * (2 if bidirectional else 1)
        self.embedding = nn.Embedding(vocab_size, emb_size, padding_idx=pad_id)
        self.dropout = Dropout(dropout)
        self.rnn = make_rnn(cell, emb_size, hidden_size, num_layers, dropout, bidirectional)

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """Args: src ``(B, S)`` token ids, src_lengths ``(B,)`` all >= 1."""
        emb = self.dropout(self.embedding(src))  # (B, S, E)
        packed = pack_padded_sequence(emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, final = self.rnn(packed)
        memory, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))  # (B, S, H)
        final = map_state(lambda f: merge_directions(f, self.num_layers), final)  # (L, B, H)
        return EncoderOutput(memory, final)
