"""Loading checkpoints safely and decoding with them."""

import pytest
import torch

from seq2seq_attn.data.toy import toy_vocab
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.inference import load_model, translate_tokens
from seq2seq_attn.lit_module import Seq2SeqLitModule


def save_checkpoint(path, **hparams):
    hparams = {"emb_size": 8, "hidden_size": 8, **hparams}
    module = Seq2SeqLitModule(src_vocab_size=14, trg_vocab_size=14, **hparams)
    vocab = toy_vocab(10)
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "vocab": {"src": vocab.itos, "trg": vocab.itos},
        },
        path,
    )
    return module


@pytest.mark.parametrize("attention,flow", [("general", "luong"), ("none", "none")])
def test_load_and_translate_keeps_line_count(tmp_path, attention, flow):
    original = save_checkpoint(tmp_path / "m.ckpt", attention=attention, flow=flow)
    module = load_model(tmp_path / "m.ckpt")
    for a, b in zip(original.state_dict().values(), module.state_dict().values()):
        assert torch.equal(a, b)
    sentences = [["a", "b", "c"], [], ["d"], ["zzz", "a"]]
    out = translate_tokens(module, sentences, beam_size=2)
    assert len(out) == 4 and out[1].tokens == [] and out[1].weights is None
    if attention != "none":
        assert len(out[0].weights) == len(out[0].tokens) and len(out[0].weights[0]) == 3


def test_missing_or_foreign_checkpoints_fail_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="checkpoint not found"):
        load_model(tmp_path / "nope.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ConfigError, match="not a seq2seq-attn checkpoint"):
        load_model(tmp_path / "other.ckpt")
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(ConfigError, match="cannot load"):
        load_model(tmp_path / "junk.ckpt")


@pytest.mark.parametrize("attention", ["general", "dot"])
def test_a_checkpoint_of_unscaled_heads_fails_in_one_line(tmp_path, attention):
    """Heads saved before they were scaled: no head_scale (and, for general, a per-head W_i)."""
    module = save_checkpoint(tmp_path / "m.ckpt", attention=attention, flow="luong", heads=2)
    checkpoint = torch.load(tmp_path / "m.ckpt", weights_only=True)
    scale = checkpoint["state_dict"].pop("model.decoder.attention.head_scale")
    assert scale.item() == pytest.approx(8**-0.5, rel=1e-12)  # 1 / sqrt(d_h), d_h = 16 / 2
    if attention == "general":
        checkpoint["state_dict"]["model.decoder.attention.bilinear"] = torch.eye(8).repeat(2, 1, 1)  # W_i per head
    torch.save(checkpoint, tmp_path / "m.ckpt")
    with pytest.raises(ConfigError, match=r"without the 1/sqrt\(d_h\) scale .* train the model again") as error:
        load_model(tmp_path / "m.ckpt")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="without the 1/sqrt"):  # Lightning's loading calls the same method
        module.load_state_dict(checkpoint["state_dict"])
    module.load_state_dict(module.state_dict())  # a checkpoint of scaled heads loads
