"""``precision: auto``: the GEMM probe, its per-machine cache, the choice and the run folder's record."""

import functools
import json
from pathlib import Path

import pytest
import torch

from seq2seq_attn import precision
from seq2seq_attn.lightning_cli import make_cli, run_cli

ROOT = Path(__file__).resolve().parents[1]
BASE = str(ROOT / "experiments" / "base.yaml")
REVERSE = str(ROOT / "experiments" / "toy" / "reverse.yaml")
AMX = {"fp32": 250.0, "bf16": 1400.0, "int8": 900.0}  # rates seen on a Xeon with AMX (bf16 5.6x)
NO_AMX = {"fp32": 300.0, "bf16": 160.0, "int8": 700.0}  # a Xeon VM with AVX-512 BF16 but no AMX


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("S2S_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "precision_probe.json"


def fixed(rates, calls=None):
    def measure():
        if calls is not None:
            calls.append(1)
        return dict(rates)

    return measure


@pytest.mark.parametrize("rates,expected", [(AMX, "bf16-mixed"), (NO_AMX, "32-true")])
def test_training_choice_follows_the_bf16_speedup(rates, expected, cache):
    choice = precision.training_precision("cpu", fixed(rates))
    assert choice.precision == expected and choice.rates == rates and not choice.cached
    ratio = rates["bf16"] / rates["fp32"]
    assert f"{ratio:.2f}x" in choice.reason and ("<" in choice.reason) == (expected == "32-true")


def test_the_threshold_is_inclusive(cache):
    assert precision.training_precision("cpu", fixed({"fp32": 100, "bf16": 200, "int8": 1})).precision == "bf16-mixed"
    cache.unlink()
    assert precision.training_precision("cpu", fixed({"fp32": 100, "bf16": 199, "int8": 1})).precision == "32-true"


def test_rates_are_measured_once_per_machine_then_cached(cache):
    calls = []
    first = precision.training_precision("cpu", fixed(AMX, calls))
    second = precision.training_precision("cpu", fixed(NO_AMX, calls))  # would choose otherwise if it measured
    assert len(calls) == 1 and not first.cached and second.cached
    assert second.precision == first.precision == "bf16-mixed"
    stored = json.loads(cache.read_text())
    assert stored == {precision.machine_key(): AMX}


def test_a_corrupt_cache_is_measured_again(cache):
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    calls = []
    assert precision.training_precision("cpu", fixed(NO_AMX, calls)).precision == "32-true" and calls == [1]
    assert json.loads(cache.read_text())[precision.machine_key()] == NO_AMX


def test_the_cache_key_changes_with_threads(cache):
    before = precision.machine_key()
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert precision.machine_key() != before
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "numbers, expected",
    [
        ("cpu family\t: 25\nmodel\t\t: 17\n", "AMD EPYC (family 25, model 17)"),
        ("", "AMD EPYC"),  # a file without the numbers (e.g. on ARM): the name alone
    ],
)
def test_the_cpu_is_named_with_its_family_and_model(numbers, expected, tmp_path):
    # two EPYC generations both report the bare name "AMD EPYC": only family/model tell Zen 3 from Zen 4
    info = tmp_path / "cpuinfo"
    info.write_text(
        f"processor\t: 0\nvendor_id\t: AuthenticAMD\n{numbers}model name\t: AMD EPYC\n"
        "flags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\ncpu family\t: 99\nmodel\t\t: 1\n"
    )
    model, flags = precision.cpu_description(str(info))
    assert model == expected
    assert flags == ["avx512_bf16", "avx512f"]


def test_decoding_picks_the_fastest_format_on_cpu_and_fp32_on_cuda(cache):
    assert precision.decoding_precision("cpu", fixed(NO_AMX)).precision == "int8"
    fast_bf16 = {"fp32": 250.0, "bf16": 1400.0, "int8": 900.0}
    cache.unlink()
    assert precision.decoding_precision("cpu", fixed(fast_bf16)).precision == "bf16"
    calls = []
    assert precision.decoding_precision("cuda:0", fixed(AMX, calls)).precision == "fp32" and calls == []


def test_the_real_probe_measures_positive_rates():
    rates = precision.probe(seconds=0.01)
    assert set(rates) == {"fp32", "bf16", "int8"} and all(rate > 0 for rate in rates.values())


def quiet(tmp_path):
    return ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]


@pytest.mark.parametrize("rates,expected", [(AMX, "bf16-mixed"), (NO_AMX, "32-true")])
def test_auto_from_the_command_line_builds_that_trainer_and_records_why(rates, expected, cache, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "probe", fixed(rates))
    run = tmp_path / "run"
    args = ["--config", BASE, "--config", REVERSE, *quiet(tmp_path), "--trainer.default_root_dir", str(run)]
    cli = run_cli(["fit", *args, "--trainer.precision", "auto", "--trainer.fast_dev_run", "1"])
    assert cli.trainer.precision == expected and cli.trainer.precision_choice.precision == expected
    record = json.loads((run / "precision.json").read_text())
    assert record["requested"] == "auto" and record["precision"] == expected and record["rates"] == rates
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])


def test_auto_in_a_config_file_and_other_values_unchanged(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "probe", fixed(NO_AMX))
    config = tmp_path / "auto.yaml"
    config.write_text("trainer:\n  precision: auto\n")
    args = ["--config", BASE, "--config", REVERSE, *quiet(tmp_path), "--trainer.default_root_dir", str(tmp_path)]
    assert make_cli([*args, "--config", str(config)], run=False).trainer.precision == "32-true"
    cli = make_cli([*args, "--trainer.precision", "bf16-mixed"], run=False)
    assert cli.trainer.precision == "bf16-mixed" and cli.trainer.precision_choice is None


def test_an_unknown_precision_is_one_line_naming_auto(tmp_path):
    from seq2seq_attn.errors import ConfigError

    with pytest.raises(ConfigError, match="auto"):
        make_cli(["--config", BASE, *quiet(tmp_path), "--trainer.precision", "bf17"], run=False)


def test_the_precision_command_prints_rates_and_both_choices(cache, monkeypatch, capsys):
    from seq2seq_attn.cli import main

    calls = []
    monkeypatch.setattr(precision, "probe", fixed(AMX, calls))
    main(["precision"])
    main(["precision"])
    main(["precision", "--remeasure"])
    printed = capsys.readouterr().out
    assert len(calls) == 2 and printed.count("training: precision auto -> bf16-mixed") == 3
    assert "decoding: precision auto -> bf16" in printed and "fp32 250, bf16 1400, int8 900" in printed


BF16_MODELS = [
    {"flow": "bahdanau", "attention": "additive"},
    {"flow": "luong", "attention": "general"},
    {"flow": "luong", "attention": "dot", "input_feed": False},
    {"flow": "none", "attention": "none"},
    {"flow": "bahdanau", "attention": "additive", "coverage": True},
    {"flow": "luong", "attention": "general", "heads": 4},
    {"flow": "luong", "attention": "general", "alignment": "local-p", "window": 3},
    {"arch": "transformer", "flow": None, "attention": None, "num_layers": 2, "heads": 4, "ffn_size": 64},
]


def fixed_batch():
    from helpers import V_SRC, V_TRG

    from seq2seq_attn.data.collate import Batch

    lengths = torch.tensor([9, 7, 4, 2])
    src = torch.randint(4, V_SRC, (4, 9))
    src[torch.arange(9).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    trg_out = torch.randint(4, V_TRG, (4, 8))
    trg_out[:, -1] = 2
    trg_in = torch.cat([torch.ones(4, 1, dtype=torch.long), trg_out[:, :-1]], 1)
    return Batch(src, lengths, trg_in, trg_out, None, torch.arange(4))


def small_model(options: dict) -> torch.nn.Module:
    from helpers import V_SRC, V_TRG

    from seq2seq_attn.lit_module import Seq2SeqLitModule

    sizes = {"emb_size": 32, "hidden_size": 32, "dec_hidden_size": 64, "dropout": 0.0}
    return Seq2SeqLitModule(src_vocab_size=V_SRC, trg_vocab_size=V_TRG, **sizes, **options).model


@pytest.mark.parametrize("mode", ["bf16-mixed", "bf16-compute"])
@pytest.mark.parametrize("options", BF16_MODELS, ids=lambda o: "-".join(f"{v}" for v in o.values() if v)[:40])
def test_bf16_training_loss_and_gradients_stay_close_to_fp32_on_a_fixed_batch(mode, options):
    """What ``bf16-mixed`` (autocast) and ``bf16-compute`` (weights cast once, fp32 master weights)
    compute: the loss within 1%, every parameter's gradient fp32 and pointing the same way (cosine >= 0.99)
    as fp32's on the same batch."""
    from seq2seq_attn.loss import token_loss

    torch.manual_seed(3)
    model, batch = small_model(options), fixed_batch()

    def loss_and_grads(number_format: str):
        model.zero_grad()
        if number_format == "bf16-compute":
            context = precision.bf16_weights(model)
        else:
            context = torch.autocast("cpu", dtype=torch.bfloat16, enabled=number_format == "bf16-mixed")
        with context:
            loss = token_loss(model, batch)
        loss.backward()
        assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
        return loss.detach().float(), {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}

    loss32, grads32 = loss_and_grads("32-true")
    loss16, grads16 = loss_and_grads(mode)
    assert loss16.dtype == torch.float32 and abs(loss16 - loss32) / loss32 < 0.01
    for name, grad in grads32.items():
        if grad.norm() > 1e-6:
            cosine = torch.nn.functional.cosine_similarity(grad.flatten(), grads16[name].flatten(), dim=0)
            assert cosine >= 0.99, (name, float(cosine))


def attribute(module: torch.nn.Module, dotted: str) -> torch.Tensor:
    """What the module's own code reads as ``self.<dotted>`` (e.g. ``decoder.rnn.weight_hh_l0``)."""
    return functools.reduce(getattr, dotted.split("."), module)


@pytest.mark.parametrize("options", [
    {"flow": "bahdanau", "attention": "additive"},
    {"arch": "transformer", "flow": None, "attention": None, "num_layers": 1, "heads": 2, "ffn_size": 32,
     "tie_embeddings": True},
], ids=["rnn", "tied-transformer"])  # fmt: skip
def test_bf16_weights_casts_once_and_leaves_the_module_as_it_was(options):
    module = small_model(options)
    before = module.state_dict(keep_vars=True)  # name -> the fp32 Parameter or buffer itself
    rnns = [(m, m._flat_weights, list(m._flat_weights)) for m in module.modules() if isinstance(m, torch.nn.RNNBase)]
    with precision.bf16_weights(module):
        read = {name: attribute(module, name) for name in before}
        assert all(read[n].dtype == torch.bfloat16 for n, t in before.items() if t.is_floating_point())
        assert all(w.dtype == torch.bfloat16 for m, _, _ in rnns for w in m._flat_weights)
        after_inside = module.state_dict(keep_vars=True)
        assert list(after_inside) == list(before) and all(after_inside[n] is before[n] for n in before)
        if options.get("tie_embeddings"):  # one parameter, one copy: still tied
            assert read["output.weight"] is read["trg_embed.tokens.weight"]
    after = module.state_dict(keep_vars=True)
    assert list(after) == list(before) and all(after[n] is before[n] for n in before)
    assert all(attribute(module, n) is before[n] for n in before)  # no copy is left shadowing a weight
    for m, own, weights in rnns:
        assert m._flat_weights is own and all(a is b for a, b in zip(own, weights))


@pytest.mark.parametrize("options", [{"flow": "bahdanau", "attention": "additive"},
                                     {"flow": "luong", "attention": "general"}], ids=["bahdanau", "luong"])  # fmt: skip
def test_bf16_compute_memorises_reverse_pairs(options):
    """Trained and searched in bf16 (weights cast once per step), the fp32 master weights still learn."""
    from helpers import memorise_reverse_pairs

    from seq2seq_attn.modules import build_seq2seq

    torch.manual_seed(0)
    failure = memorise_reverse_pairs(
        lambda v: build_seq2seq(v, v, emb_size=32, hidden_size=32, **options), compute=precision.bf16_weights
    )
    assert failure == ""


def test_bf16_compute_from_the_command_line_trains_fp32_weights(tmp_path):
    run = tmp_path / "run"
    args = ["--config", BASE, "--config", REVERSE, *quiet(tmp_path), "--trainer.default_root_dir", str(run)]
    cli = run_cli(["fit", *args, "--trainer.precision", "bf16-compute", "--trainer.fast_dev_run", "2"])
    assert cli.trainer.precision == "bf16-compute"
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])
    assert all(p.dtype == torch.float32 for p in cli.model.parameters())


def test_bf16_compute_with_another_precision_plugin_is_one_line(tmp_path):
    from seq2seq_attn.errors import ConfigError
    from seq2seq_attn.trainer import Trainer

    with pytest.raises(ConfigError, match="drop the other"):
        Trainer(precision="bf16-compute", plugins=[__import__("pytorch_lightning").plugins.precision.Precision()])
