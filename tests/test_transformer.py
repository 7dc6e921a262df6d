"""The Transformer reference: causal masking, incremental decoding, padding, search, training, configs."""

import pytest
import torch
from helpers import V_SRC, V_TRG, gold_prefix, memorise_reverse_pairs

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.lit_module import Seq2SeqLitModule
from seq2seq_attn.modules.transformer import build_transformer
from seq2seq_attn.optim import lr_factor
from seq2seq_attn.quantize import int8_copy
from seq2seq_attn.search import SearchSettings, beam_search, greedy_search, search

VARIANTS = [("pre", "sinusoidal", False), ("post", "learned", True), ("pre", "rotary", False)]


def tiny(norm="pre", positions="sinusoidal", tie=False, layers=2):
    return build_transformer(V_SRC, V_TRG, size=8, heads=2, layers=layers, ffn_size=16, dropout=0.0,
                             positions=positions, norm=norm, tie_embeddings=tie, max_positions=12).eval()  # fmt: skip


@pytest.mark.parametrize("norm,positions,tie", VARIANTS)
def test_logits_at_t_do_not_see_later_target_tokens(norm, positions, tie, src_batch):
    model, (src, lengths) = tiny(norm, positions, tie), src_batch
    trg_in = gold_prefix()
    changed = trg_in.clone()
    changed[:, 4:] = torch.randint(4, V_TRG, (3, 2))
    a, b = model(src, lengths, trg_in).logits, model(src, lengths, changed).logits
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("norm,positions,tie", VARIANTS)
def test_incremental_decoding_equals_recomputing_the_prefix(norm, positions, tie, src_batch):
    model, (src, lengths) = tiny(norm, positions, tie), src_batch
    trg_in = gold_prefix()
    memory, state = model.encode(src, lengths)
    for t in range(trg_in.size(1)):
        step = model.decode_step(trg_in[:, t], state, memory)
        state = step.state
        full = model(src, lengths, trg_in[:, : t + 1])  # the whole prefix again
        torch.testing.assert_close(step.log_probs, full.logits[:, -1].log_softmax(-1), atol=1e-5, rtol=0)
        torch.testing.assert_close(step.weights, full.weights[:, -1], atol=1e-5, rtol=0)
        assert state.keys[0].size(2) == t + 1  # one cached position per step, nothing recomputed


def test_padded_source_tokens_change_nothing(src_batch):
    model, (src, lengths) = tiny(), src_batch
    noisy = src.clone()
    noisy[torch.arange(5).unsqueeze(0) >= lengths.unsqueeze(1)] = 7
    trg = gold_prefix()
    a, b = model(src, lengths, trg), model(noisy, lengths, trg)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-6, rtol=0)
    assert (a.weights.masked_select(~(torch.arange(5) < lengths.unsqueeze(1)).unsqueeze(1)) == 0).all()
    torch.testing.assert_close(a.weights.sum(-1), torch.ones(3, 6), atol=1e-6, rtol=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_batched_search_equals_one_sentence_at_a_time(beam):
    torch.manual_seed(3)
    model = tiny()
    lengths = torch.tensor([6, 1, 4, 2])
    src = torch.randint(4, V_SRC, (4, 6))
    src[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    settings = SearchSettings(beam_size=beam, alpha=0.6, max_len_a=1.0, max_len_b=3)
    run = greedy_search if beam == 1 else beam_search
    batched = run(model, src, lengths, settings)
    for i in range(4):
        single = run(model, src[i : i + 1, : int(lengths[i])], lengths[i : i + 1], settings)
        assert torch.equal(batched.tokens[i, : single.tokens.size(1)], single.tokens[0])
        torch.testing.assert_close(batched.scores[i], single.scores[0], atol=1e-4, rtol=0)


def test_int8_decoding_scores_like_fp32(src_batch):
    model, (src, lengths) = tiny(), src_batch
    settings = SearchSettings(beam_size=3, max_len_a=0.0, max_len_b=6)
    low, reference = search(int8_copy(model), src, lengths, settings), search(model, src, lengths, settings)
    torch.testing.assert_close(low.scores, reference.scores, atol=0.35, rtol=0)


def test_memorises_four_reverse_pairs():
    torch.manual_seed(0)

    def build(vocab: int):
        sizes = dict(size=32, heads=4, layers=2, ffn_size=64, dropout=0.0, max_positions=32)
        return build_transformer(vocab, vocab, positions="sinusoidal", norm="pre", tie_embeddings=False, **sizes)

    assert not (failure := memorise_reverse_pairs(build, lr=0.003, steps=400)), failure


def test_the_lightning_module_builds_it_and_refuses_rnn_options():
    module = Seq2SeqLitModule(arch="transformer", flow=None, attention=None, emb_size=16, heads=4, num_layers=1)
    assert type(module.model).__name__ == "Transformer"
    with pytest.raises(
        ConfigError, match="arch 'transformer' takes no flow .*set model.flow and model.attention to null"
    ):
        Seq2SeqLitModule(arch="transformer", flow="bahdanau", attention=None, emb_size=16, heads=4)
    with pytest.raises(ConfigError, match=r"unknown arch 'lstm': choose one of \['rnn', 'transformer'\]"):
        Seq2SeqLitModule(arch="lstm")
    with pytest.raises(ConfigError, match="heads .* must divide"):
        Seq2SeqLitModule(arch="transformer", flow=None, attention=None, emb_size=10, heads=4)


def test_warmup_then_inverse_square_root_and_cosine_schedules():
    inv = lr_factor("inverse_sqrt", total_steps=1000, warmup_steps=100)
    assert inv(0) == pytest.approx(0.01) and inv(99) == pytest.approx(1.0) and inv(400) == pytest.approx(0.5)
    cos = lr_factor("cosine", total_steps=1100, warmup_steps=100)
    assert cos(49) == pytest.approx(0.5) and cos(100) == pytest.approx(1.0) and cos(1100) == pytest.approx(0.0)
    assert lr_factor("none", 10)(5) == 1.0
