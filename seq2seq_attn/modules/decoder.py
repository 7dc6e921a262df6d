"""Decoder flows: when to attend relative to the RNN update.

Every flow is a subclass of :class:`RNNDecoder` that defines its input and
feature sizes and one ``step``; the teacher-forced ``forward`` and the search
both run through that ``step``. A flow whose step does not depend on its own
previous output (Luong without input feeding, the bottleneck) sets
``parallel`` and runs ``step`` once over all T target positions.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.attention import AttentionState, Memory, NoAttention
from seq2seq_attn.modules.dropout import Dropout
from seq2seq_attn.modules.rnn import RNNState, make_rnn, map_state, top_hidden


@dataclass(frozen=True)
class DecoderSizes:
    vocab: int  # V
    emb: int  # E
    hidden: int  # D
    memory: int  # H
    layers: int = 1  # L


class DecoderState(NamedTuple):
    rnn: RNNState  # (L, B, D), or (h, c) for an LSTM
    feed: Optional[Tensor]  # (B, 1, D) previous attentional vector (input feeding), else None
    attn: Optional[AttentionState] = None  # steps taken, coverage; None without attention

    def index_select(self, index: Tensor) -> "DecoderState":
        """Pick or repeat batch rows (beam search). Args: index ``(B',)``."""
        rnn = map_state(lambda s: s.index_select(1, index), self.rnn)
        feed = None if self.feed is None else self.feed.index_select(0, index)
        attn = None if self.attn is None else self.attn.index_select(index)
        return DecoderState(rnn, feed, attn)


class StepOutput(NamedTuple):
    features: Tensor  # (B, T, F) what the output layer reads
    state: DecoderState
    weights: Optional[Tensor]  # (B, T, S) attention weights, None without attention
    energies: Optional[Tensor] = None  # (B, h, T, S) the energies behind them (see AttentionOutput)


class DecoderOutput(NamedTuple):
    logits: Tensor  # (B, T, V), or (N, V) for the selected positions
    weights: Optional[Tensor]  # (B, T, S), None without attention
    energies: Optional[Tensor]  # (B, h, T, S), None without attention


class RNNDecoder(nn.Module):
    """Embedding, a GRU/LSTM, an attention module and one output layer.

    The output layer runs once over all T steps in teacher-forced training.
    """

    flow = "base"
    parallel = False

    def __init__(self, cell: str, sizes: DecoderSizes, attention: nn.Module, dropout: float = 0.0) -> None:
        super().__init__()
        self.sizes = sizes
        self.embedding = nn.Embedding(sizes.vocab, sizes.emb)
        self.dropout = Dropout(dropout)
        self.rnn = make_rnn(cell, self.rnn_input_size(sizes), sizes.hidden, sizes.layers, dropout)
        self.attention = attention
        self.output = nn.Linear(self.feature_size(sizes), sizes.vocab)

    def rnn_input_size(self, sizes: DecoderSizes) -> int:
        raise NotImplementedError

    def feature_size(self, sizes: DecoderSizes) -> int:
        raise NotImplementedError

    def init_state(self, rnn_state: RNNState, memory: Memory) -> DecoderState:
        """Args: rnn_state ``(L, B, D)`` from the bridge."""
        return DecoderState(rnn_state, None, self.attention.init_state(memory))

    def step(self, emb: Tensor, state: DecoderState, memory: Memory) -> StepOutput:
        """Args: emb ``(B, T, E)`` embedded previous tokens (T=1 unless ``parallel``)."""
        raise NotImplementedError

    def embed(self, tokens: Tensor) -> Tensor:
        """Args: tokens ``(B, T)``. Returns ``(B, T, E)``."""
        return self.dropout(self.embedding(tokens))

    def logits(self, features: Tensor, select: Optional[Tensor] = None) -> Tensor:
        """Args: features ``(B, T, F)``; select ``(B, T)`` bool or None.

        Returns ``(B, T, V)``, or ``(N, V)`` for the N selected positions only: training
        skips the padding, and the output layer is about half of the model's FLOPs.
        """
        features = self.dropout(features)  # on every position, so the dropout masks do not depend on select
        if select is not None:  # index_select, not features[select]: 0.3 vs 2.2 ms forward + backward
            features = features.flatten(0, 1).index_select(0, select.flatten().nonzero().squeeze(1))  # (N, F)
        return self.output(features)

    def forward(
        self, trg_in: Tensor, state: DecoderState, memory: Memory, select: Optional[Tensor] = None
    ) -> DecoderOutput:
        """Teacher forcing. Args: trg_in ``(B, T)`` starting with BOS; select see :meth:`logits`.

        Returns: logits ``(B, T, V)`` (or ``(N, V)``), weights ``(B, T, S)`` and energies ``(B, h, T, S)``
        (both None without attention).
        """
        emb = self.embed(trg_in)  # (B, T, E)
        if self.parallel:
            out = self.step(emb, state, memory)
            return DecoderOutput(self.logits(out.features, select), out.weights, out.energies)
        features, weights, energies = [], [], []
        # unbind, not emb[:, t]: a slice's backward writes a zero-padded (B, T, E) gradient at every step
        for emb_t in emb.unbind(1):
            out = self.step(emb_t.unsqueeze(1), state, memory)
            state = out.state
            features.append(out.features)
            weights.append(out.weights)
            energies.append(out.energies)
        all_weights = None if weights[0] is None else torch.cat(weights, dim=1)  # (B, T, S)
        all_energies = None if energies[0] is None else torch.cat(energies, dim=2)  # (B, h, T, S)
        return DecoderOutput(self.logits(torch.cat(features, dim=1), select), all_weights, all_energies)


class BahdanauDecoder(RNNDecoder):
    """Bahdanau et al. 2015: attend with s(t-1), then update.

    ``c(t) = attend(s(t-1))``; ``s(t) = RNN([emb(y(t-1)); c(t)], s(t-1))``;
    ``logits = W_o [s(t); c(t); emb(y(t-1))]`` (a linear deep output).
    """

    flow = "bahdanau"

    def rnn_input_size(self, sizes: DecoderSizes) -> int:
        return sizes.emb + sizes.memory

    def feature_size(self, sizes: DecoderSizes) -> int:
        return sizes.hidden + sizes.memory + sizes.emb

    def step(self, emb: Tensor, state: DecoderState, memory: Memory) -> StepOutput:
        query = top_hidden(state.rnn).unsqueeze(1)  # (B, 1, D)
        attended = self.attention(query, memory, state.attn)  # context (B, 1, H), weights (B, 1, S)
        # T > 1 only for the bottleneck, whose context does not depend on the state
        context = attended.context.expand(-1, emb.size(1), -1)  # (B, T, H)
        output, rnn_state = self.rnn(torch.cat([emb, context], dim=-1), state.rnn)  # (B, T, D)
        features = torch.cat([output, context, emb], dim=-1)  # (B, T, D+H+E)
        state = DecoderState(rnn_state, None, attended.state)
        return StepOutput(features, state, attended.weights, attended.energies)


class BottleneckDecoder(BahdanauDecoder):
    """The no-attention baseline (Cho et al. 2014; Bahdanau's RNNencdec).

    The Bahdanau flow with :class:`NoAttention` (which :func:`build_decoder`
    checks): the context is the same
    fixed-size source summary at every step, so teacher forcing runs all T
    steps in one RNN call.
    """

    flow = "none"
    parallel = True


class LuongDecoder(RNNDecoder):
    """Luong et al. 2015: update, then attend with s(t).

    ``s(t) = RNN(x(t), s(t-1))`` with ``x(t) = [emb(y(t-1)); s~(t-1)]`` when
    ``input_feed`` (Sec. 3.3) else ``emb(y(t-1))``; ``c(t) = attend(s(t))``;
    ``s~(t) = tanh(W_c [c(t); s(t)])`` (Eq. 5); ``logits = W_s s~(t)`` (Eq. 6).
    Without input feeding nothing feeds back, so training runs the RNN over
    the whole target in one call and attends for all T steps at once.
    """

    flow = "luong"

    def __init__(
        self,
        cell: str,
        sizes: DecoderSizes,
        attention: nn.Module,
        dropout: float = 0.0,
        input_feed: bool = True,
    ) -> None:
        self.input_feed = input_feed  # read by rnn_input_size during super().__init__
        super().__init__(cell, sizes, attention, dropout)
        self.combine = nn.Linear(sizes.memory + sizes.hidden, sizes.hidden, bias=False)
        self.parallel = not input_feed and not attention.sequential  # coverage needs each step's weights

    def rnn_input_size(self, sizes: DecoderSizes) -> int:
        return sizes.emb + (sizes.hidden if self.input_feed else 0)

    def feature_size(self, sizes: DecoderSizes) -> int:
        return sizes.hidden

    def init_state(self, rnn_state: RNNState, memory: Memory) -> DecoderState:
        feed = torch.zeros_like(top_hidden(rnn_state)).unsqueeze(1) if self.input_feed else None  # (B, 1, D)
        return DecoderState(rnn_state, feed, self.attention.init_state(memory))

    def step(self, emb: Tensor, state: DecoderState, memory: Memory) -> StepOutput:
        inputs = emb if state.feed is None else torch.cat([emb, state.feed], dim=-1)  # (B, T, E[+D])
        output, rnn_state = self.rnn(inputs, state.rnn)  # (B, T, D)
        attended = self.attention(output, memory, state.attn)  # context (B, T, H), weights (B, T, S)
        attentional = torch.tanh(self.combine(torch.cat([attended.context, output], dim=-1)))  # (B, T, D)
        feed = attentional[:, -1:] if self.input_feed else None  # (B, 1, D)
        state = DecoderState(rnn_state, feed, attended.state)
        return StepOutput(attentional, state, attended.weights, attended.energies)


DECODERS: dict[str, type[RNNDecoder]] = {
    "bahdanau": BahdanauDecoder,
    "luong": LuongDecoder,
    "none": BottleneckDecoder,
}


def check_flow_attention(flow: str, attention: str) -> None:
    """The baseline pairs flow ``none`` with attention ``none``; neither goes with anything else."""
    if flow not in DECODERS:
        raise ConfigError(f"unknown flow {flow!r}: choose one of {sorted(DECODERS)}")
    if flow == "none" and attention != "none":
        raise ConfigError(
            "flow 'none' is the no-attention baseline and takes no scorer: "
            "set attention to 'none', or pick flow 'bahdanau' or 'luong'"
        )
    if flow != "none" and attention == "none":
        raise ConfigError(
            f"attention 'none' is the bottleneck baseline: set flow to 'none' (not {flow!r}), or pick a scorer"
        )


def build_decoder(
    flow: str,
    cell: str,
    sizes: DecoderSizes,
    attention: nn.Module,
    dropout: float = 0.0,
    input_feed: bool = True,
) -> RNNDecoder:
    """Instantiate a flow by name; ``input_feed`` matters only to ``luong``."""
    check_flow_attention(flow, "none" if isinstance(attention, NoAttention) else "scorer")
    if flow == "luong":
        return LuongDecoder(cell, sizes, attention, dropout, input_feed=input_feed)
    return DECODERS[flow](cell, sizes, attention, dropout)
