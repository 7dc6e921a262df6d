"""Local (local-m, local-p), location, coverage and multi-head attention: the properties every attention
has, each variant's own equation by hand, and the model-level guarantees for every entry of
``helpers.ATTENTION_VARIANTS``."""

import math

import pytest
import torch
from helpers import ATTENTION_VARIANTS, CELLS, V_SRC, V_TRG, memorise_reverse_pairs, tiny_model, variant_id

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.loss import coverage_loss
from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.modules.attention import (
    Attention,
    AttentionOptions,
    LocalPredictiveAttention,
    build_attention,
)
from seq2seq_attn.modules.multihead import MultiHeadAttention
from seq2seq_attn.search import SearchSettings, beam_search, coverage_penalty

B, S, T, D = 3, 7, 5, 8
LENGTHS = torch.tensor([7, 4, 1])
MASK = torch.arange(S).unsqueeze(0) < LENGTHS.unsqueeze(1)  # (B, S)
MODULES = {  # attention modules alone: (scorer, options)
    "local-m": ("general", AttentionOptions(alignment="local-m", window=1)),
    "local-p": ("additive", AttentionOptions(alignment="local-p", window=2)),
    "location": ("location", AttentionOptions(max_source_length=5)),
    "coverage": ("concat", AttentionOptions(coverage=True)),
    "heads": ("scaled_dot", AttentionOptions(heads=2)),
}


def make(name, dtype=torch.float32):
    scorer, options = MODULES[name]
    attention = build_attention(scorer, D, D, options).to(dtype)
    values = torch.randn(B, S, D, dtype=dtype)
    return attention, attention.prepare(values, MASK, values[:, 0])


def run_steps(attention, memory, steps=T, dtype=torch.float32):
    """Attend step by step from a fresh state; returns the outputs."""
    state, outs = attention.init_state(memory), []
    for _ in range(steps):
        out = attention(torch.randn(B, 1, D, dtype=dtype), memory, state)
        outs.append(out)
        state = out.state
    return outs


@pytest.mark.parametrize("name", sorted(MODULES))
def test_weights_are_a_masked_distribution(name):
    attention, memory = make(name)
    for out in run_steps(attention, memory):
        assert (out.weights >= 0).all()
        torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, 1), atol=1e-6, rtol=0)
        assert (out.weights.masked_select(~MASK.unsqueeze(1)) == 0).all()


def test_local_m_looks_only_inside_its_window_around_t():
    attention, memory = make("local-m")
    for t, out in enumerate(run_steps(attention, memory)):
        for b in range(B):
            aligned = min(t, int(LENGTHS[b]) - 1)  # p_t = t, clamped to the sentence's last word
            outside = [s for s in range(S) if abs(s - aligned) > 1]
            assert (out.weights[b, 0, outside] == 0).all() and out.weights[b, 0, aligned] > 0


def test_local_p_weights_are_the_windowed_softmax_times_the_gaussian_by_hand(monkeypatch):
    attention, memory = make("local-p")
    fixed = torch.tensor([[2.6], [1.2], [0.3]])  # a predicted position per sentence, (B, T=1)
    monkeypatch.setattr(LocalPredictiveAttention, "aligned", lambda self, q, m, s: fixed)
    query = torch.randn(B, 1, D)
    with torch.no_grad():
        out = attention(query, memory, attention.init_state(memory))
        energies = attention.scorer(query, memory.keys)  # (B, 1, S)
    sigma = 2 / 2  # D / 2
    for b in range(B):
        p = float(fixed[b, 0])
        window = [s for s in range(int(LENGTHS[b])) if abs(s - p) <= 2]
        soft = torch.softmax(energies[b, 0, window], -1)  # Luong's windowed align(h_t, h_s)
        gauss = torch.tensor([math.exp(-((s - p) ** 2) / (2 * sigma**2)) for s in window])
        expected = soft * gauss / (soft * gauss).sum()
        torch.testing.assert_close(out.weights[b, 0, window], expected, atol=1e-6, rtol=1e-5)
        assert out.weights[b, 0].sum() == pytest.approx(1.0, abs=1e-6)


def test_local_p_predicts_a_position_inside_each_sentence():
    attention, memory = make("local-p")
    aligned = attention.aligned(torch.randn(B, T, D), memory, attention.init_state(memory))  # (B, T)
    assert ((aligned >= 0) & (aligned <= LENGTHS.unsqueeze(1).float() - 1)).all()
    with torch.no_grad():  # a saturated sigmoid reaches the sentence's last word (position S_x - 1), not beyond
        attention.predict[0].weight.copy_(torch.eye(D))  # tanh(W_p h) = tanh(h)
        attention.v_p.weight.fill_(1e3)
        query = torch.ones(B, T, D)
        aligned = attention.aligned(query, memory, attention.init_state(memory))
        assert torch.equal(aligned, (LENGTHS.unsqueeze(1).float() - 1).expand(B, T))
        assert torch.equal(attention.aligned(-query, memory, attention.init_state(memory)), torch.zeros(B, T))


def test_location_energies_ignore_the_keys_and_stop_at_the_maximum_length():
    attention, memory = make("location")  # max_source_length 5 < S = 7
    query = torch.randn(B, 1, D)
    with torch.no_grad():
        out = attention(query, memory, attention.init_state(memory))
    assert (out.weights[0, 0, 5:] == 0).all() and out.weights[0, 0, :5].sum() == pytest.approx(1.0, abs=1e-6)
    shuffled = memory._replace(keys=memory.keys.flip(1))
    torch.testing.assert_close(attention(query, shuffled, attention.init_state(memory)).weights, out.weights)


def test_coverage_is_the_running_sum_of_the_weights_and_never_falls():
    attention, memory = make("coverage")
    assert attention.sequential
    outs = run_steps(attention, memory)
    running = torch.zeros(B, S)
    for out in outs:
        before = running.clone()
        running = running + out.weights[:, 0]
        torch.testing.assert_close(out.state.coverage, running)
        assert (out.state.coverage >= before).all()
    assert outs[-1].state.step.tolist() == [T] * B


def test_coverage_loss_by_hand():
    weights = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.6, 0.2], [0.9, 0.1, 0.0]]])  # (1, T=3, S=3)
    real = torch.tensor([[True, True, False]])
    # step 0: nothing covered; step 1: min(.2,.5)+min(.6,.5)+min(.2,0) = 0.7; step 2 is padding
    assert coverage_loss(weights, real).item() == pytest.approx(0.7 / 2)


def test_one_head_is_the_plain_scorer_exactly():
    torch.manual_seed(1)
    one = build_attention("general", D, D, AttentionOptions(heads=1))
    torch.manual_seed(1)
    plain = build_attention("general", D, D)
    assert type(one) is Attention and not isinstance(one, MultiHeadAttention)
    values, query = torch.randn(B, S, D), torch.randn(B, T, D)
    a = one(query, one.prepare(values, MASK, values[:, 0]), one.init_state(one.prepare(values, MASK, values[:, 0])))
    prepared = plain.prepare(values, MASK, values[:, 0])
    b = plain(query, prepared, plain.init_state(prepared))
    assert torch.equal(a.context, b.context) and torch.equal(a.weights, b.weights)


def test_multi_head_weights_are_the_mean_of_the_heads():
    attention, memory = make("heads")
    out = attention(torch.randn(B, T, D), memory, attention.init_state(memory))
    assert out.head_weights.shape == (B, 2, T, S)
    torch.testing.assert_close(out.weights, out.head_weights.mean(1))
    assert (out.head_weights.masked_select(~MASK[:, None, None, :].expand_as(out.head_weights)) == 0).all()
    assert not torch.allclose(out.head_weights[:, 0], out.head_weights[:, 1])  # the heads differ


@pytest.mark.parametrize("scorer", ["dot", "general", "scaled_dot"])
@pytest.mark.parametrize("heads", [2, 4])
def test_multi_head_equals_torch_multihead_attention(scorer, heads):
    torch.manual_seed(heads)
    ours = build_attention(scorer, D, D, AttentionOptions(heads=heads)).double()
    theirs = torch.nn.MultiheadAttention(D, heads, bias=False, batch_first=True).double()
    with torch.no_grad():  # nn.MultiheadAttention packs W_q, W_k, W_v into one in_proj_weight (3D, D)
        theirs.in_proj_weight.copy_(torch.cat([ours.query_proj.weight, ours.key_proj.weight, ours.value_proj.weight]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
    values, query = torch.randn(B, S, D, dtype=torch.double) * 3, torch.randn(B, T, D, dtype=torch.double) * 3
    memory = ours.prepare(values, MASK, values[:, 0])
    out = ours(query, memory, ours.init_state(memory))
    context, weights = theirs(query, values, values, key_padding_mask=~MASK, average_attn_weights=False)
    torch.testing.assert_close(out.context, context, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(out.head_weights, weights, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(out.energies.softmax(-1), weights, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_gradcheck_in_float64(name):
    attention, _ = make(name, torch.double)
    values = torch.randn(B, S, D, dtype=torch.double, requires_grad=True)  # the encoder outputs
    query = torch.randn(B, 1, D, dtype=torch.double, requires_grad=True)

    def run(q, v):
        prepared = attention.prepare(v, MASK, v[:, 0])
        state = attention.init_state(prepared)
        first = attention(q, prepared, state)
        return attention(q * 0.5, prepared, first.state).context  # a second step reads the first's state

    assert torch.autograd.gradcheck(run, (query, values))


@pytest.mark.parametrize(
    "scorer,options,message",
    [
        ("additive", AttentionOptions(heads=2), "multiplicative scorers"),
        ("dot", AttentionOptions(coverage=True), "coverage enters the energy"),
        ("none", AttentionOptions(alignment="local-m"), "has no alignment"),
        ("general", AttentionOptions(alignment="local-x"), "unknown alignment 'local-x'"),
        ("general", AttentionOptions(heads=3), "heads must divide"),
        ("general", AttentionOptions(heads=2, alignment="local-p"), "multi-head attention goes with"),
    ],
)
def test_impossible_combinations_fail_in_one_line(scorer, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        build_attention(scorer, D, D, options)
    assert "\n" not in str(err.value)


# -- the model-level guarantees, for every entry of ATTENTION_VARIANTS ------------------------------
VARIANT_IDS = [variant_id(v) for v in ATTENTION_VARIANTS]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("variant", ATTENTION_VARIANTS, ids=VARIANT_IDS)
def test_teacher_forcing_equals_the_step_loop(variant, cell, src_batch):
    flow, attention, feed, options = variant
    model = tiny_model(flow, attention, cell, input_feed=feed, **options)
    src, lengths = src_batch
    trg_in = torch.randint(4, V_TRG, (3, 6))
    trg_in[:, 0] = 1
    out = model(src, lengths, trg_in)
    memory, state = model.encode(src, lengths)
    steps = []
    for t in range(trg_in.size(1)):
        steps.append(model.decode_step(trg_in[:, t], state, memory))
        state = steps[-1].state
    torch.testing.assert_close(
        out.logits.log_softmax(-1), torch.stack([r.log_probs for r in steps], 1), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(out.weights, torch.stack([r.weights for r in steps], 1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ATTENTION_VARIANTS, ids=VARIANT_IDS)
def test_batched_beam_equals_one_sentence_at_a_time(variant):
    """Beam reordering carries the attention state (coverage, steps): a sentence decodes alone as in a batch."""
    flow, attention, feed, options = variant
    torch.manual_seed(3)
    model = tiny_model(flow, attention, "gru", input_feed=feed, **options)
    lengths = torch.tensor([6, 1, 4, 2])
    src = torch.randint(4, V_SRC, (4, 6))
    src[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    settings = SearchSettings(beam_size=3, alpha=0.6, max_len_a=1.0, max_len_b=3, coverage_penalty=0.2)
    batched = beam_search(model, src, lengths, settings)
    for i in range(4):
        single = beam_search(model, src[i : i + 1, : int(lengths[i])], lengths[i : i + 1], settings)
        assert torch.equal(batched.tokens[i, : single.tokens.size(1)], single.tokens[0])
        torch.testing.assert_close(batched.scores[i], single.scores[0], atol=1e-4, rtol=0)


def test_the_coverage_penalty_is_in_the_returned_score(src_batch):
    """Score = log p / lp + β Σ_s log min(Σ_t a_ts, 1), recomputed from the returned tokens and weights."""
    model = tiny_model("luong", "general", "gru")
    src, lengths = src_batch
    beta, alpha = 0.4, 0.5
    hyp = beam_search(model, src, lengths, SearchSettings(beam_size=3, alpha=alpha, coverage_penalty=beta))
    plain = beam_search(model, src, lengths, SearchSettings(beam_size=3, alpha=alpha))
    real = torch.arange(src.size(1)) < lengths.unsqueeze(1)
    for b in range(3):
        n = int(hyp.lengths[b]) + int(int(hyp.lengths[b]) < hyp.tokens.size(1))  # with EOS where there is one
        memory, state = model.encode(src[b : b + 1], lengths[b : b + 1])
        logp, prev = 0.0, torch.tensor([1])
        for t in range(n):
            out = model.decode_step(prev, state, memory)
            logp += out.log_probs[0, hyp.tokens[b, t]].item()
            prev, state = hyp.tokens[b, t : t + 1], out.state
        covered = hyp.weights[b, :n].sum(0)  # (S,)
        expected = logp / ((5 + n) / 6) ** alpha + float(coverage_penalty(covered, real[b], beta))
        assert hyp.scores[b].item() == pytest.approx(expected, abs=1e-4)
    assert (hyp.scores <= plain.scores + 1e-5).all()  # the penalty is never a bonus


@pytest.mark.parametrize("variant", ATTENTION_VARIANTS, ids=VARIANT_IDS)
def test_each_variant_memorises_four_reverse_pairs(variant):
    flow, attention, feed, options = variant
    torch.manual_seed(0)
    options = {**options, "max_source_length": 8} if attention == "location" else options

    def build(vocab: int):
        return build_seq2seq(vocab, vocab, attention=attention, flow=flow, emb_size=16, hidden_size=16,
                             input_feed=feed, **options)  # fmt: skip

    assert not (failure := memorise_reverse_pairs(build, steps=400)), failure
