"""RNN cells and the helpers that hide the LSTM ``(h, c)`` tuple.

A recurrent state is either a tensor ``(L, B, D)`` (GRU) or a pair of them
``(h, c)`` (LSTM). Code outside this file never tests which one it holds: it
calls :func:`top_hidden` for the attention query and :func:`map_state` to
reorder, expand or transform a state.
"""

from typing import Callable, Union

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError

RNNState = Union[Tensor, tuple[Tensor, Tensor]]

CELLS: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}


def make_rnn(
    cell: str,
    input_size: int,
    hidden_size: int,
    num_layers: int = 1,
    dropout: float = 0.0,
    bidirectional: bool = False,
) -> nn.RNNBase:
    """Build a batch-first ``nn.GRU`` or ``nn.LSTM`` by name."""
    if cell not in CELLS:
        raise ConfigError(f"unknown cell {cell!r}: choose one of {sorted(CELLS)}")
    return CELLS[cell](
        input_size,
        hidden_size,
        num_layers=num_layers,
        batch_first=True,
        dropout=dropout if num_layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


def map_state(fn: Callable[[Tensor], Tensor], state: RNNState) -> RNNState:
    """Apply ``fn`` to the hidden state, and to the LSTM cell state if any."""
    if isinstance(state, tuple):
        return tuple(fn(s) for s in state)  # type: ignore[return-value]
    return fn(state)


def top_hidden(state: RNNState) -> Tensor:
    """The top layer's hidden state: ``(L, B, D) -> (B, D)``."""
    hidden = state[0] if isinstance(state, tuple) else state
    return hidden[-1]  # (L, B, D) -> (B, D)


def merge_directions(final: Tensor, num_layers: int) -> Tensor:
    """Concatenate both directions per layer: ``(L*dirs, B, h) -> (L, B, dirs*h)``."""
    directions = final.size(0) // num_layers
    final = final.view(num_layers, directions, final.size(1), final.size(2))
    return torch.cat(final.unbind(1), dim=-1)  # (L, B, dirs*h)


class Bridge(nn.Module):
    """Maps the encoder's final states to the decoder's initial state, per layer.

    ``s0 = tanh(W [h_fwd; h_bwd])`` for each layer, from both directions' final states
    (each direction's last step over the sentence). Bahdanau 2015 (App. A.2.2) starts
    from the backward direction's first state alone (``tanh(W_s h_1_bwd)``); the final
    states of both directions carry that one and the forward summary as well, as in
    OpenNMT-py's and Joey NMT's bridges. An LSTM cell state gets its own linear map
    (no tanh: cell states are unbounded).
    """

    def __init__(self, cell: str, encoder_size: int, decoder_size: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(encoder_size, decoder_size)
        self.cell = nn.Linear(encoder_size, decoder_size) if cell == "lstm" else None

    def forward(self, final: RNNState) -> RNNState:
        """Args: final: ``(L, B, H)`` or a pair of them. Returns ``(L, B, D)`` likewise."""
        if isinstance(final, tuple):
            h, c = final
            return torch.tanh(self.hidden(h)), self.cell(c)  # (L, B, D) x2
        return torch.tanh(self.hidden(final))  # (L, B, D)
