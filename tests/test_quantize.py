"""Int8 decoding: every model variant quantises, scores like fp32 within int8 error, leaves the original alone."""

import pytest
import torch
from helpers import ATTENTION_VARIANTS, CELLS, V_TRG, VARIANTS, tiny_model, variant_id
from torch import nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.quantize import float_only, int8_copy
from seq2seq_attn.search import SearchSettings, search


def is_int8(module: nn.Module) -> bool:
    return ".quantized." in type(module).__module__


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_int8_copy_scores_like_fp32(flow, attention, cell, input_feed, src_batch):
    model = tiny_model(flow, attention, cell, input_feed)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    int8 = int8_copy(model)
    # every RNN and every called Linear is int8; the weights a scorer reads as tensors stay float
    keep = float_only(int8)
    modules = dict(int8.named_modules())
    assert is_int8(modules["decoder.output"]) and is_int8(modules["decoder.rnn"]) and is_int8(modules["encoder.rnn"])
    assert all(not is_int8(modules[name]) for name in keep)
    if attention in ("additive", "concat"):  # v is read as a tensor by TanhEnergy
        assert "decoder.attention.scorer.v" in keep
    # the original is untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    src, lengths = src_batch
    tokens = torch.randint(4, V_TRG, (6, src.size(0)))  # (T, B) teacher-forced previous tokens
    with torch.no_grad():
        (memory, state), (memory8, state8) = model.encode(src, lengths), int8.encode(src, lengths)
        for prev in tokens:
            out, out8 = model.decode_step(prev, state, memory), int8.decode_step(prev, state8, memory8)
            assert (out8.log_probs - out.log_probs).abs().max() < 0.05  # int8 rounding, not a different model
            if out.weights is not None:
                assert (out8.weights - out.weights).abs().max() < 0.05
            state, state8 = out.state, out8.state


def test_int8_search_scores_like_fp32_greedy_and_beam(src_batch):
    model = tiny_model("bahdanau", "concat", "lstm")
    int8 = int8_copy(model)
    src, lengths = src_batch
    for beam in (1, 3):
        settings = SearchSettings(beam_size=beam, max_len_a=0.0, max_len_b=7)
        hyp, reference = search(int8, src, lengths, settings), search(model, src, lengths, settings)
        assert bool((hyp.lengths <= 7).all())
        # each step's log-probabilities are within 0.05 nats of fp32 (test above): 7 steps at most
        torch.testing.assert_close(hyp.scores, reference.scores, atol=0.35, rtol=0)


def test_int8_off_cpu_fails_in_one_line():
    model = tiny_model("luong", "general", "gru").to("meta")
    with pytest.raises(ConfigError, match="CPU only.*--device cpu"):
        int8_copy(model)


@pytest.mark.parametrize("variant", ATTENTION_VARIANTS, ids=[variant_id(v) for v in ATTENTION_VARIANTS])
def test_int8_decodes_every_attention_variant_like_fp32(variant, src_batch):
    flow, attention, feed, options = variant
    model = tiny_model(flow, attention, "gru", feed, **options)
    int8 = int8_copy(model)
    src, lengths = src_batch
    settings = SearchSettings(beam_size=3, max_len_a=0.0, max_len_b=6, coverage_penalty=0.1)
    low, reference = search(int8, src, lengths, settings), search(model, src, lengths, settings)
    torch.testing.assert_close(low.scores, reference.scores, atol=0.35, rtol=0)
