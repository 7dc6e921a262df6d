"""Batched greedy and beam search: against exhaustive search on scripted models, and on real tiny models."""

import math

import pytest
import torch
from helpers import CELLS, V_SRC, VARIANTS, tiny_model
from scripted_model import EOS, ScriptedModel, exhaustive_best, random_attention, random_table, score

from seq2seq_attn import search as search_module
from seq2seq_attn.search import SearchSettings, beam_search, greedy_search, length_penalty, max_lengths, row_topk

BOS = 1


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


def scripted_run(probs, sentences: int, settings: SearchSettings):
    """Beam search on a scripted model, one source token per sentence (its number), cap = max_len_b."""
    src = torch.arange(sentences).unsqueeze(1)  # (B, 1)
    return beam_search(ScriptedModel(probs), src, torch.ones(sentences, dtype=torch.long), settings)


def test_beam_keeps_a_finished_hypothesis_that_live_beams_push_out():
    """EOS is among the 3 best at step 0 (log p -2.303); three live beams outscore it at step 1
    but end worse at the cap, so the early EOS is the best hypothesis the search saw."""

    def probs(sentence, prefix):
        if not prefix:  # PAD BOS EOS 3 4 5
            return [0.0, 0.0, 0.1, 0.05, 0.6, 0.25]
        return [0.0, 0.0, 0.001, 0.2, 0.3, 0.499]

    hyp = scripted_run(probs, 1, SearchSettings(beam_size=3, max_len_a=0.0, max_len_b=4))
    assert hyp.to_lists() == [[]] and hyp.tokens[0, 0].item() == EOS
    assert hyp.scores.item() == pytest.approx(math.log(0.1), abs=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.7])
@pytest.mark.parametrize("seed", range(4))
def test_beam_wide_enough_equals_exhaustive_search(seed, alpha):
    vocab, cap = 5, 4  # two words and EOS: 2**4 live prefixes at most, so K = 16 keeps them all
    probs = random_table(vocab, seed)
    hyp = scripted_run(probs, 3, SearchSettings(beam_size=16, alpha=alpha, max_len_a=0.0, max_len_b=cap))
    for sentence in range(3):
        best, best_score = exhaustive_best(probs, sentence, vocab, cap, alpha)
        n = int(hyp.lengths[sentence])
        got = tuple(hyp.tokens[sentence, : n + int(n < hyp.tokens.size(1) and hyp.tokens[sentence, n] == EOS)].tolist())
        assert got == best
        assert hyp.scores[sentence].item() == pytest.approx(best_score, abs=1e-5)


@pytest.mark.parametrize("beta", [0.2, 1.0, 5.0])
@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_beam_wide_enough_with_a_coverage_penalty_equals_exhaustive_search(alpha, beta):
    """With the coverage penalty the ranking is no longer log p's: every live beam at the length cap
    must compete as a cut hypothesis, not only the most probable one."""
    vocab, cap, sources, sentences = 5, 4, 3, 8
    table, attention = random_table(vocab, seed=5), random_attention(sources, seed=5)

    def probs(sentence, prefix):  # EOS made rare, so that hypotheses cut at the cap compete too
        p = table(sentence, prefix)
        p[EOS] *= 0.02 if sentence % 2 else 1.0
        return [x / sum(p) for x in p]

    src = torch.cat([torch.arange(sentences).unsqueeze(1), torch.full((sentences, sources - 1), 3)], dim=1)  # (B, S)
    settings = SearchSettings(32, alpha, 0.0, cap, coverage_penalty=beta)  # K = 32: no candidate is pruned
    hyp = beam_search(ScriptedModel(probs, attention), src, torch.full((sentences,), sources), settings)
    for sentence in range(sentences):
        best, best_score = exhaustive_best(probs, sentence, vocab, cap, alpha, attention, beta)
        n = int(hyp.lengths[sentence])
        got = tuple(hyp.tokens[sentence, : n + int(n < hyp.tokens.size(1) and hyp.tokens[sentence, n] == EOS)].tolist())
        assert (got, hyp.scores[sentence].item()) == (best, pytest.approx(best_score, abs=1e-4))


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("beam", [2, 3])
def test_beam_returns_the_best_hypothesis_it_finished(beam, alpha, monkeypatch):
    """Every hypothesis the search set aside was offered to the results: the returned one is their best."""
    offered: dict[int, list[float]] = {}
    original = search_module._Results.offer

    def recording(self, rows, scores, tokens, weights):
        for row, s in zip(rows.tolist(), scores.tolist()):
            offered.setdefault(row, []).append(s)
        original(self, rows, scores, tokens, weights)

    monkeypatch.setattr(search_module._Results, "offer", recording)
    probs = random_table(7, seed=11)
    hyp = scripted_run(probs, 6, SearchSettings(beam_size=beam, alpha=alpha, max_len_a=0.0, max_len_b=6))
    for sentence in range(6):
        assert hyp.scores[sentence].item() == pytest.approx(max(offered[sentence]), abs=1e-6)
        n = int(hyp.lengths[sentence])
        tokens = (
            tuple(hyp.tokens[sentence, : n + 1].tolist())
            if n < hyp.tokens.size(1)
            else tuple(hyp.tokens[sentence].tolist())
        )
        lp = float(length_penalty(torch.tensor(len(tokens)), alpha))
        assert score(probs, sentence, tokens) / lp == pytest.approx(hyp.scores[sentence].item(), abs=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_alpha_changes_the_winner(alpha):
    """[EOS] scores log 0.4 = -0.916 at length 1, [3, EOS] log 0.6 + log 0.5 = -1.204 at length 2:
    without a length penalty the short one wins; with alpha 2, -1.204 / (7/6)**2 = -0.885 wins."""

    def probs(sentence, prefix):
        return [0.0, 0.0, 0.4, 0.6] if not prefix else [0.0, 0.0, 0.5, 0.5]

    hyp = scripted_run(probs, 1, SearchSettings(beam_size=2, alpha=alpha, max_len_a=0.0, max_len_b=3))
    assert hyp.to_lists() == ([[]] if alpha == 0.0 else [[3]])


@pytest.mark.parametrize("seed", range(6))
def test_beam_one_scores_at_least_what_greedy_scores(seed):
    """Beam 1's live path is greedy's path up to greedy's EOS, which beam 1 then sees as a candidate."""
    probs = random_table(6, seed)
    src, lengths = torch.arange(4).unsqueeze(1), torch.ones(4, dtype=torch.long)
    settings = SearchSettings(beam_size=1, alpha=0.0, max_len_a=0.0, max_len_b=5)
    greedy = greedy_search(ScriptedModel(probs), src, lengths, settings)
    for alpha in (0.0, 1.0):
        beam = beam_search(ScriptedModel(probs), src, lengths, SearchSettings(1, alpha, 0.0, 5))
        lp = length_penalty(
            greedy.lengths + (greedy.tokens.gather(1, greedy.lengths.clamp(max=4)[:, None]) == EOS).squeeze(1).long(),
            alpha,
        )
        assert (beam.scores >= greedy.scores / lp - 1e-6).all()
        if alpha == 0.0:  # without a length penalty nothing can beat greedy's early stop: the same outputs
            assert torch.equal(beam.tokens, greedy.tokens)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_batched_greedy_equals_one_at_a_time(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed=input_feed)
    src, lengths = src_batch
    assert_batched_equals_one_at_a_time(lambda s, n: greedy_search(model, s, n, SearchSettings()), src, lengths)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_batched_beam_equals_one_at_a_time(flow, attention, input_feed, alpha):
    # sentences stop at different steps and leave the batch: the others must not notice
    torch.manual_seed(3)
    model = tiny_model(flow, attention, "gru", input_feed=input_feed)
    lengths = torch.tensor([6, 1, 4, 2, 5, 3])
    src = torch.randint(4, V_SRC, (6, 6))
    src[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    settings = SearchSettings(beam_size=3, alpha=alpha, max_len_a=1.0, max_len_b=3)
    for eos_bias in (None, -1e4):  # the model's own stops, then none: every sentence runs to its own cap
        if eos_bias is not None:
            model.decoder.output.bias.data[EOS] = eos_bias
        batched = assert_batched_equals_one_at_a_time(lambda s, n: beam_search(model, s, n, settings), src, lengths)
    assert batched.lengths.tolist() == (lengths + 3).tolist()  # six different stopping steps


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_beam_one_equals_greedy_without_length_penalty(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed=input_feed)
    src, lengths = src_batch
    greedy = greedy_search(model, src, lengths, SearchSettings())
    beam = beam_search(model, src, lengths, SearchSettings())
    assert torch.equal(greedy.tokens, beam.tokens)
    torch.testing.assert_close(greedy.scores, beam.scores, atol=1e-5, rtol=0)
    torch.testing.assert_close(greedy.weights, beam.weights, atol=1e-6, rtol=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_search_without_weights_gives_the_same_hypotheses(beam, src_batch):
    model = tiny_model("luong", "general", "gru")
    src, lengths = src_batch
    settings = SearchSettings(beam_size=beam, max_len_a=0.0, max_len_b=6)
    full = beam_search(model, src, lengths, settings)
    bare = beam_search(model, src, lengths, SearchSettings(beam, 0.0, 0.0, 6, keep_weights=False))
    assert full.weights is not None and bare.weights is None
    assert torch.equal(full.tokens, bare.tokens) and torch.equal(full.scores, bare.scores)
    if beam == 1:
        greedy = greedy_search(model, src, lengths, SearchSettings(1, 0.0, 0.0, 6, keep_weights=False))
        assert greedy.weights is None and torch.equal(greedy.tokens, full.tokens)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("flow,attention", [("bahdanau", "additive"), ("luong", "dot"), ("none", "none")])
def test_beam_score_and_weights_are_those_of_the_returned_tokens(flow, attention, alpha, src_batch):
    model = tiny_model(flow, attention, "gru")
    src, lengths = src_batch
    beam = beam_search(model, src, lengths, SearchSettings(beam_size=4, alpha=alpha))
    memory, state = model.encode(src, lengths)
    total, n_tokens = torch.zeros(3), torch.zeros(3, dtype=torch.long)
    prev = torch.full((3,), BOS)
    for t in range(beam.tokens.size(1)):
        out = model.decode_step(prev, state, memory)
        tok = beam.tokens[:, t]
        live = (t <= beam.lengths) & (tok != 0)  # up to and including EOS, if any
        total += torch.where(live, out.log_probs.gather(1, tok.clamp(min=0).unsqueeze(1)).squeeze(1), 0)
        n_tokens += live.long()
        if beam.weights is not None:
            expected = torch.where(live.unsqueeze(1), out.weights, torch.zeros_like(out.weights))
            torch.testing.assert_close(beam.weights[:, t], expected, atol=1e-5, rtol=0)
        prev, state = tok, out.state
    torch.testing.assert_close(total / length_penalty(n_tokens, alpha), beam.scores, atol=1e-4, rtol=0)


def test_output_length_is_capped_per_sentence(src_batch):
    model = tiny_model("bahdanau", "additive", "gru")
    model.decoder.output.bias.data[EOS] = -1e4  # EOS never wins: every sentence runs to its cap
    src, lengths = src_batch
    for beam in (1, 3):
        result = beam_search(model, src, lengths, SearchSettings(beam_size=beam, max_len_a=1.0, max_len_b=2))
        assert result.lengths.tolist() == (lengths + 2).tolist()
        assert result.tokens.size(1) == 7


def test_length_penalty_values():
    assert length_penalty(torch.tensor([1]), 0.0).item() == 1.0
    assert length_penalty(torch.tensor([7]), 1.0).item() == pytest.approx(2.0)
    assert max_lengths(torch.tensor([3, 10]), 1.5, 2).tolist() == [6, 17]


def test_search_under_bf16_autocast_stays_close_to_fp32(src_batch):
    model = tiny_model("luong", "additive", "gru")
    src, lengths = src_batch
    settings = SearchSettings(beam_size=3, max_len_a=0.0, max_len_b=6)
    reference = [greedy_search(model, src, lengths, settings), beam_search(model, src, lengths, settings)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = [greedy_search(model, src, lengths, settings), beam_search(model, src, lengths, settings)]
    for fp32, bf16 in zip(reference, low):
        assert bf16.scores.dtype == torch.float32
        # bf16 keeps 8 bits of mantissa: a few 1e-2 nats over six steps of a tiny model
        # (near-ties of this tiny untrained model may pick other tokens, at the same score)
        torch.testing.assert_close(bf16.scores, fp32.scores, atol=0.1, rtol=0.02)


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
