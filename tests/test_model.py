"""Encoder, decoder flows and Seq2Seq: every flow x scorer x cell."""

import pytest
import torch
from helpers import CELLS, V_SRC, V_TRG, VARIANTS, gold_prefix, tiny_model
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.modules.dropout import Dropout
from seq2seq_attn.modules.encoder import RNNEncoder
from seq2seq_attn.modules.rnn import merge_directions


@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_selected_logits_are_the_full_logits_at_those_positions(flow, attention, input_feed, src_batch):
    model = tiny_model(flow, attention, "gru", input_feed=input_feed)
    src, lengths = src_batch
    trg_in = gold_prefix()
    select = torch.rand(trg_in.shape) < 0.6  # (B, T)
    full = model(src, lengths, trg_in).logits  # (B, T, V)
    picked = model(src, lengths, trg_in, select=select).logits  # (N, V)
    assert picked.shape == (int(select.sum()), V_TRG)
    torch.testing.assert_close(picked, full[select], atol=1e-6, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_forward_equals_step_loop(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed=input_feed)
    src, lengths = src_batch
    trg_in = gold_prefix()
    out = model(src, lengths, trg_in)
    memory, state = model.encode(src, lengths)
    steps = []
    for t in range(trg_in.size(1)):
        result = model.decode_step(trg_in[:, t], state, memory)
        steps.append(result)
        state = result.state
    log_probs = torch.stack([r.log_probs for r in steps], dim=1)  # (B, T, V)
    torch.testing.assert_close(out.logits.log_softmax(-1), log_probs, atol=1e-5, rtol=0)
    if attention == "none":
        assert out.weights is None and steps[0].weights is None
    else:
        assert out.weights.shape == (3, trg_in.size(1), src.size(1))
        weights = torch.stack([r.weights for r in steps], dim=1)
        torch.testing.assert_close(out.weights, weights, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
def test_encoder_ignores_padding(cell):
    encoder = RNNEncoder(cell, V_SRC, 6, 4, num_layers=2, bidirectional=True).eval()
    src = torch.randint(4, V_SRC, (1, 4))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    short = encoder(src, torch.tensor([4]))
    long = encoder(padded, torch.tensor([4]))
    torch.testing.assert_close(short.memory, long.memory[:, :4])
    assert (long.memory[:, 4:] == 0).all()
    final_short = short.final[0] if cell == "lstm" else short.final
    final_long = long.final[0] if cell == "lstm" else long.final
    assert final_short.shape == (2, 1, 8)
    torch.testing.assert_close(final_short, final_long)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_padded_gru_encoder_equals_nn_gru_over_packed_sequences(bidirectional):
    torch.manual_seed(0)
    encoder = RNNEncoder("gru", V_SRC, 6, 4, num_layers=2, bidirectional=bidirectional).eval()
    lengths = torch.tensor([5, 2, 4, 1])
    src = torch.randint(4, V_SRC, (4, 5)).masked_fill(torch.arange(5) >= lengths.unsqueeze(1), 0)
    out = encoder(src, lengths)
    packed = pack_padded_sequence(encoder.embedding(src), lengths, batch_first=True, enforce_sorted=False)
    outputs, final = encoder.rnn(packed)  # the reference: nn.GRU over packed sequences
    memory, _ = pad_packed_sequence(outputs, batch_first=True, total_length=5)
    torch.testing.assert_close(out.memory, memory)
    torch.testing.assert_close(out.final, merge_directions(final, 2))
    out.memory.sum().backward()  # gradients reach every layer and direction
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.rnn.parameters())


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"attention": "bahdanau"}, ["additive", "general", "none"]),
        ({"flow": "transformer"}, ["bahdanau", "luong", "none"]),
        ({"cell": "rnn"}, ["gru", "lstm"]),
        ({"flow": "none", "attention": "dot"}, ["'none'"]),
        ({"flow": "luong", "attention": "none"}, ["flow to 'none'"]),
    ],
)
def test_bad_names_fail_at_construction_in_one_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        build_seq2seq(V_SRC, V_TRG, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert all(w in message for w in words), message


def test_dot_needs_matching_sizes():
    with pytest.raises(ConfigError, match="general"):
        build_seq2seq(V_SRC, V_TRG, attention="dot", hidden_size=8, dec_hidden_size=10)
    build_seq2seq(V_SRC, V_TRG, attention="general", hidden_size=8, dec_hidden_size=10)


def test_luong_parallel_path_runs_rnn_once(src_batch):
    model = tiny_model("luong", "general", "gru", input_feed=False)
    calls = []
    model.decoder.rnn.register_forward_hook(lambda *a: calls.append(1))
    src, lengths = src_batch
    model(src, lengths, gold_prefix(steps=7))
    assert len(calls) == 1


def test_cpu_dropout_keeps_1_minus_p_scaled_and_routes_gradient_through_the_mask():
    torch.manual_seed(0)
    drop = Dropout(0.2)
    x = torch.ones(200_000, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.8) < 0.005  # binomial sd ~0.0009
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1.25))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(x * mask)/dx = mask, which equals y for x = 1
    drop.eval()
    assert torch.equal(drop(x), x)
    torch.manual_seed(1)
    first = Dropout(0.5).train()(torch.ones(64))
    torch.manual_seed(1)
    assert torch.equal(first, Dropout(0.5).train()(torch.ones(64)))  # seeded: the same mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_dropout_keep_rate_is_unbiased_in_every_dtype(dtype):
    torch.manual_seed(0)
    y = Dropout(0.2).train()(torch.ones(2_000_000, dtype=dtype))
    # binomial sd 0.00028: 0.0012 is four of them (bf16 draws kept 0.7984)
    assert abs((y != 0).float().mean().item() - 0.8) < 0.0012
    assert y.dtype == dtype and set(y.unique().tolist()) == {0.0, 1.25}


def test_cpu_dropout_of_one_drops_everything_without_nan():
    x = torch.randn(1000, requires_grad=True)
    y = Dropout(1.0).train()(x)
    assert torch.equal(y, torch.zeros_like(y))
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_adam_falls_back_to_the_unfused_kernel_with_a_warning(monkeypatch):
    from seq2seq_attn.optim import adam

    params = [torch.nn.Parameter(torch.randn(3))]
    assert adam(params, 0.1).defaults["fused"] is True  # this torch has the CPU kernel
    original = torch.optim.Adam

    def without_cpu_kernel(*args, fused=None, **kwargs):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return original(*args, fused=fused, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", without_cpu_kernel)
    with pytest.warns(UserWarning, match="fused Adam is not available here.*unfused"):
        optimiser = adam(params, 0.1)
    assert not optimiser.defaults["fused"]


def test_param_init_draws_every_parameter_uniformly_and_keeps_padding_rows_zero():
    from seq2seq_attn.lit_module import Seq2SeqLitModule

    torch.manual_seed(0)
    module = Seq2SeqLitModule(param_init=0.1)
    values = torch.cat([p.detach().flatten() for p in module.model.parameters()])
    assert values.abs().max() <= 0.1 and values.abs().max() > 0.099  # fills the whole range
    assert abs(values.mean().item()) < 0.005 and abs(values.std().item() - 0.1 / 3**0.5) < 0.002
    assert (module.model.encoder.embedding.weight[0] == 0).all()  # PAD
    default = Seq2SeqLitModule()
    assert default.model.encoder.embedding.weight.abs().max() > 1  # PyTorch's N(0, 1) embeddings


def record_flow(flow, input_feed, steps=4):
    """Teacher-force a 1-layer GRU model, recording every query the scorer gets and the decoder
    RNN's inputs and outputs at each step. Returns the model, memory, init state and the records."""
    torch.manual_seed(5)
    sizes = dict(emb_size=6, hidden_size=4, num_layers=1)
    model = build_seq2seq(V_SRC, V_TRG, attention="general", flow=flow, input_feed=input_feed, **sizes)
    model.eval()
    queries, rnn_in, rnn_out = [], [], []

    def record_rnn(module, args, out):  # returns None: the output stays as it is
        rnn_in.append(args[0].detach())
        rnn_out.append(out[0].detach())

    model.decoder.attention.scorer.register_forward_hook(lambda m, args, out: queries.append(args[0].detach()))
    model.decoder.rnn.register_forward_hook(record_rnn)
    src, lengths = torch.randint(4, V_SRC, (2, 5)), torch.tensor([5, 3])
    src[1, 3:] = 0
    trg_in = torch.randint(4, V_TRG, (2, steps))
    memory, state = model.encode(src, lengths)
    logits, weights, _ = model.decoder(trg_in, state, memory)
    return model, memory, state, trg_in, weights, queries, rnn_in, rnn_out


def hand_context(weights, values):
    """``c = sum_s a_s h_s`` per sentence, a Python sum in float64. Args: weights ``(B, S)``, values ``(B, S, H)``."""
    return torch.stack([sum(w[s] * v[s] for s in range(len(w))) for w, v in zip(weights.double(), values.double())])


def test_bahdanau_flow_attends_with_the_previous_state_then_updates():
    model, memory, state, trg_in, weights, queries, rnn_in, rnn_out = record_flow("bahdanau", True)
    emb = model.decoder.embedding(trg_in)  # (B, T, E)
    previous = state.rnn[-1]  # s(0): the bridge's state, (B, D)
    for t in range(trg_in.size(1)):
        torch.testing.assert_close(queries[t][:, 0], previous)  # the query is s(t-1), not s(t)
        context = hand_context(weights[:, t], memory.values).float()  # c(t) from the weights of s(t-1)
        torch.testing.assert_close(rnn_in[t][:, 0], torch.cat([emb[:, t], context], -1), atol=1e-5, rtol=0)
        previous = rnn_out[t][:, 0]  # s(t)
    assert len(queries) == len(rnn_in) == trg_in.size(1)


@pytest.mark.parametrize("input_feed", [True, False])
def test_luong_flow_updates_then_attends_with_the_new_state(input_feed):
    model, memory, state, trg_in, weights, queries, rnn_in, rnn_out = record_flow("luong", input_feed)
    emb = model.decoder.embedding(trg_in)  # (B, T, E)
    if not input_feed:  # one RNN call and one attention over all T steps
        assert len(rnn_in) == len(queries) == 1
        torch.testing.assert_close(rnn_in[0], emb)
        torch.testing.assert_close(queries[0], rnn_out[0])  # the query of step t is s(t)
        return
    w_c = model.decoder.combine.weight.double()  # (D, H + D)
    feed = torch.zeros(trg_in.size(0), model.decoder.sizes.hidden)  # s~(0) = 0
    for t in range(trg_in.size(1)):
        torch.testing.assert_close(rnn_in[t][:, 0], torch.cat([emb[:, t], feed], -1), atol=1e-5, rtol=0)
        s_t = rnn_out[t][:, 0]  # (B, D)
        torch.testing.assert_close(queries[t][:, 0], s_t)  # the query is s(t), after the update
        context = hand_context(weights[:, t], memory.values)  # (B, H)
        feed = torch.tanh(torch.cat([context, s_t.double()], -1) @ w_c.t()).float()  # s~(t), Eq. 5
