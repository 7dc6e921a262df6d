"""Batched greedy and beam search."""

import pytest
import torch
from conftest import CELLS, V_SRC, VARIANTS, tiny_model

from seq2seq_attn.search import beam_search, greedy_search, length_penalty, max_lengths, row_topk

BOS, EOS = 1, 2


def assert_batched_equals_one_at_a_time(search, src, lengths):
    """``search(src, lengths)`` on the batch gives, row by row, what it gives on each sentence alone."""
    batched = search(src, lengths)
    for i in range(src.size(0)):
        n = int(lengths[i])
        single = search(src[i : i + 1, :n], lengths[i : i + 1])
        steps = single.tokens.size(1)
        assert torch.equal(batched.tokens[i, :steps], single.tokens[0])
        assert (batched.tokens[i, steps:] == 0).all()
        torch.testing.assert_close(batched.scores[i], single.scores[0], atol=1e-4, rtol=0)
        if batched.weights is not None:
            torch.testing.assert_close(batched.weights[i, :steps, :n], single.weights[0], atol=1e-5, rtol=0)
            assert (batched.weights[i, steps:] == 0).all()
    return batched


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_batched_greedy_equals_one_at_a_time(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed=input_feed)
    src, lengths = src_batch
    assert_batched_equals_one_at_a_time(lambda s, n: greedy_search(model, s, n, BOS, EOS), src, lengths)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_batched_beam_equals_one_at_a_time(flow, attention, input_feed, alpha):
    # sentences stop at different steps and leave the batch: the others must not notice
    torch.manual_seed(3)
    model = tiny_model(flow, attention, "gru", input_feed=input_feed)
    lengths = torch.tensor([6, 1, 4, 2, 5, 3])
    src = torch.randint(4, V_SRC, (6, 6))
    src[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    settings = dict(beam_size=3, alpha=alpha, max_len_a=1.0, max_len_b=3)
    for eos_bias in (None, -1e4):  # the model's own stops, then none: every sentence runs to its own cap
        if eos_bias is not None:
            model.decoder.output.bias.data[EOS] = eos_bias
        batched = assert_batched_equals_one_at_a_time(
            lambda s, n: beam_search(model, s, n, BOS, EOS, **settings), src, lengths
        )
    assert batched.lengths.tolist() == (lengths + 3).tolist()  # six different stopping steps


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_beam_one_equals_greedy(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed=input_feed)
    src, lengths = src_batch
    greedy = greedy_search(model, src, lengths, BOS, EOS)
    beam = beam_search(model, src, lengths, BOS, EOS, beam_size=1)
    assert torch.equal(greedy.tokens, beam.tokens)
    torch.testing.assert_close(greedy.scores, beam.scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_search_without_weights_gives_the_same_hypotheses(beam, src_batch):
    model = tiny_model("luong", "general", "gru")
    src, lengths = src_batch
    settings = {"beam_size": beam, "max_len_a": 0.0, "max_len_b": 6}
    full = beam_search(model, src, lengths, BOS, EOS, **settings)
    bare = beam_search(model, src, lengths, BOS, EOS, **settings, keep_weights=False)
    assert full.weights is not None and bare.weights is None
    assert torch.equal(full.tokens, bare.tokens) and torch.equal(full.scores, bare.scores)
    if beam == 1:
        greedy = greedy_search(model, src, lengths, BOS, EOS, 0, 0.0, 6, keep_weights=False)
        assert greedy.weights is None and torch.equal(greedy.tokens, full.tokens)


@pytest.mark.parametrize("flow,attention", [("bahdanau", "additive"), ("luong", "dot"), ("none", "none")])
def test_beam_finds_at_least_the_greedy_score(flow, attention, src_batch):
    model = tiny_model(flow, attention, "gru")
    src, lengths = src_batch
    greedy = greedy_search(model, src, lengths, BOS, EOS)
    beam = beam_search(model, src, lengths, BOS, EOS, beam_size=4)
    assert (beam.scores >= greedy.scores - 1e-5).all()
    # the reported score is the model's log-probability of the returned tokens
    memory, state = model.encode(src, lengths)
    total = torch.zeros(3)
    prev = torch.full((3,), BOS)
    for t in range(beam.tokens.size(1)):
        out = model.decode_step(prev, state, memory)
        tok = beam.tokens[:, t]
        live = (t <= beam.lengths) & (tok != 0)  # up to and including EOS, if any
        total += torch.where(live, out.log_probs.gather(1, tok.clamp(min=0).unsqueeze(1)).squeeze(1), 0)
        prev, state = tok, out.state
    torch.testing.assert_close(total, beam.scores, atol=1e-4, rtol=0)


def test_output_length_is_capped_per_sentence(src_batch):
    model = tiny_model("bahdanau", "additive", "gru")
    model.decoder.output.bias.data[2] = -1e4  # EOS never wins: every sentence runs to its cap
    src, lengths = src_batch
    for result in (
        greedy_search(model, src, lengths, BOS, EOS, max_len_a=1.0, max_len_b=2),
        beam_search(model, src, lengths, BOS, EOS, beam_size=3, max_len_a=1.0, max_len_b=2),
    ):
        assert result.lengths.tolist() == (lengths + 2).tolist()
        assert result.tokens.size(1) == 7


def test_length_penalty_values():
    assert length_penalty(torch.tensor([1]), 0.0).item() == 1.0
    assert length_penalty(torch.tensor([7]), 1.0).item() == pytest.approx(2.0)
    assert max_lengths(torch.tensor([3, 10]), 1.5, 2).tolist() == [6, 17]


def test_alpha_favours_longer_hypotheses(src_batch):
    model = tiny_model("bahdanau", "additive", "gru")
    src, lengths = src_batch
    short = beam_search(model, src, lengths, BOS, EOS, beam_size=5, alpha=0.0)
    long = beam_search(model, src, lengths, BOS, EOS, beam_size=5, alpha=2.0)
    assert long.lengths.sum() >= short.lengths.sum()


def test_search_under_bf16_autocast_keeps_fp32_scores(src_batch):
    model = tiny_model("luong", "additive", "gru")
    src, lengths = src_batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        greedy = greedy_search(model, src, lengths, BOS, EOS)
        beam = beam_search(model, src, lengths, BOS, EOS, beam_size=3)
    for result in (greedy, beam):
        assert result.scores.dtype == torch.float32 and torch.isfinite(result.scores).all()


@pytest.mark.parametrize("width", [5, 130, 1000, 5987])
@pytest.mark.parametrize("k", [1, 5])
def test_row_topk_equals_torch_topk(width, k):
    torch.manual_seed(width + k)
    x = torch.randn(40, width).log_softmax(-1)
    x[:, :2] = float("-inf")  # forbidden tokens, as search sets them
    x[3, width // 2 :] += 50.0  # one row whose best tokens all sit in few chunks
    values, indices = row_topk(x, min(k, width))
    expected = x.topk(min(k, width), dim=-1)
    torch.testing.assert_close(values, expected.values, atol=0, rtol=0)
    assert torch.equal(indices, expected.indices)
