"""The seq2seq-attn CLI: configs, smoke runs, a real short training, errors."""

import csv
import json
import subprocess
from pathlib import Path

import pytest
import torch

from seq2seq_attn.cli import main
from seq2seq_attn.lightning_cli import make_cli, run_cli

ROOT = Path(__file__).resolve().parents[1]
BASE = str(ROOT / "experiments" / "base.yaml")
REVERSE = str(ROOT / "experiments" / "toy" / "reverse.yaml")
RUN_CONFIGS = sorted(p for p in (ROOT / "experiments").rglob("*.yaml") if "ablations" not in p.parts)


def quiet(tmp_path):
    return [
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
    ]


@pytest.mark.parametrize("config", RUN_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_experiment_config_instantiates(config, tmp_path):
    folder_base = config.parent / "base.yaml"
    chain = [Path(BASE), *([folder_base] if folder_base.is_file() and config.parent != Path(BASE).parent else [])]
    chain += [config] if config not in chain else []
    configs = [arg for c in chain for arg in ("--config", str(c))]
    if "ParallelDataModule" in "".join(c.read_text() for c in chain):
        configs += ["--data.init_args.max_train", "300", "--data.init_args.max_eval", "20"]
    if "wmt14_en_fr" in config.parts:  # no network: a tiny generated en-fr dataset stands in for wmt/wmt14
        from hf_tiny import save_tiny_translation

        configs += ["--data.init_args.hf_dataset", save_tiny_translation(tmp_path / "wmt14_tiny")]
    cli = make_cli([*configs, *quiet(tmp_path)], run=False)
    if cli.config.model.arch == "rnn":
        assert cli.model.model.decoder.flow == cli.config.model.flow
    else:
        assert type(cli.model.model).__name__ == "Transformer" and cli.config.model.flow is None
    assert cli.model.hparams.src_vocab_size == cli.datamodule.src_vocab_size


@pytest.mark.parametrize(
    "flow,attention,feed",
    [
        ("bahdanau", "additive", "true"),
        ("luong", "general", "false"),
        ("luong", "concat", "true"),
        ("none", "none", "true"),
    ],
)
def test_fast_dev_run_each_flow(flow, attention, feed, tmp_path):
    args = [*quiet(tmp_path), "--trainer.fast_dev_run", "2", "--model.cell", "lstm"]
    args += ["--model.flow", flow, "--model.attention", attention, "--model.input_feed", feed]
    cli = run_cli(["fit", "--config", BASE, "--config", REVERSE, *args])
    model = cli.model.model
    assert cli.trainer.global_step == 2 and torch.isfinite(cli.trainer.callback_metrics["train/loss"])
    scorer = getattr(model.decoder.attention, "scorer", None)
    assert model.decoder.flow == flow and getattr(scorer, "name", "none") == attention
    assert isinstance(model.encoder.rnn, torch.nn.LSTM) and isinstance(model.decoder.rnn, torch.nn.LSTM)
    assert getattr(model.decoder, "input_feed", True) == (feed == "true")


@pytest.mark.slow
def test_short_training_reaches_exact_match_and_writes_buckets(tmp_path, capsys):
    overrides = [
        *"--trainer.logger false --trainer.enable_progress_bar false --trainer.max_epochs 6".split(),
        *"--model.scheduler cosine".split(),  # an annealed lr: the constant one's val loss still jumps at epoch 6
        *"--data.init_args.test_size 400 --data.init_args.test_lengths [5,15] --model.test_buckets [8,12]".split(),
        "--trainer.default_root_dir", str(tmp_path),
    ]  # fmt: skip

    def run(command, *extra):
        main([command, "--config", BASE, "--config", REVERSE, *overrides, *extra])

    run("fit")
    ckpt = str(tmp_path / "checkpoints" / "best.ckpt")
    history = [json.loads(line) for line in (tmp_path / "val_history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == list(range(6)) and history[-1]["seconds"] > history[0]["seconds"]
    assert all(0 < h["validation_seconds"] < h["seconds"] for h in history)  # what validating costs, within the clock
    assert history[-1]["overall"]["exact_match"] > history[0]["overall"]["exact_match"]  # it learned
    assert all({"lo", "hi", "loss"} <= set(b) for h in history for b in h["buckets"])
    assert any("exact_match" in b for b in history[-1]["buckets"])  # the decoded examples' buckets
    assert {p.name for p in (tmp_path / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    environment = json.loads((tmp_path / "environment.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert environment["packages"]["torch"] == torch.__version__ and environment["git_commit"] == head.stdout.strip()
    run("test", "--model.beam_size", "2", "--ckpt_path", ckpt)
    results = json.loads((tmp_path / "test_results.json").read_text())
    assert results["meta"]["beam_size"] == 2  # test-time settings stay the user's
    assert results["overall"]["exact_match"] >= 0.95, results["overall"]  # 0.995 on the development machine
    assert [b["bucket"] for b in results["buckets"]] == ["1-8", "9-12", "13+"]
    assert sum(b["count"] for b in results["buckets"]) == 400
    with open(tmp_path / "test_buckets.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["bucket"] for r in rows} == {"all", "1-8", "9-12", "13+"}
    assert "Test results per source length" in capsys.readouterr().out
    run("predict", "--ckpt_path", ckpt)
    predictions = (tmp_path / "predictions.txt").read_text().splitlines()
    assert len(predictions) == 400 and all(set(line.split()) <= set("abcdefghijklmnopqrst") for line in predictions)
    with pytest.raises(SystemExit):  # the checkpoint was trained with another scorer
        run("test", "--model.attention", "dot", "--ckpt_path", ckpt)
    assert "checkpoint has attention='additive' but --model.attention says 'dot'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # data with another vocabulary than the model's
        run("test", "--data.init_args.num_symbols", "12", "--ckpt_path", ckpt)
    assert "checkpoint has src_vocab_size=24 but the config says 16" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--model.attention", "bahdanau"], "unknown attention 'bahdanau': choose one of ['additive'"),
        (["--model.atention", "dot"], "unknown config key 'model.atention'; did you mean model.attention"),
        (["--data.init_args.task", "revers"], "data.task: Expected a typing.Literal['copy', 'reverse', 'sort']"),
        (["--model.hidden_size", "-4"], "model.hidden_size: Not of type PositiveInt"),
        (["--model.hidden_size", "abc"], "model.hidden_size: Not of type PositiveInt"),
        (["--model.flow", "bahdanu"], "unknown flow 'bahdanu': choose one of ['bahdanau', 'luong', 'none']"),
        (["--model.cell", "rnnx"], "unknown cell 'rnnx': choose one of ['gru', 'lstm']"),
        (
            ["--model.attention", "dot", "--model.flow", "luong", "--model.dec_hidden_size", "50"],
            "attention 'dot' needs equal query and key sizes, got decoder 50 and encoder output 128",
        ),
        (["--model.dropout", "1.5"], "dropout must be in [0, 1), got 1.5"),
        (["--model.label_smoothing", "2"], "label_smoothing must be in [0, 1), got 2.0"),
        (
            ["--trainer.plugins", '[{"class_path": "pytorch_lightning.plugins.io.TorchCheckpointIO"}]'],
            "trainer.plugins sets its own checkpoint IO (TorchCheckpointIO)",
        ),
        (["--ckpt_path", "missing.ckpt"], "checkpoint not found: missing.ckpt"),
    ],
)
def test_cli_errors_are_one_line(args, expected, tmp_path, capsys):
    command = "test" if "--ckpt_path" in args else "fit"
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--config", BASE, *quiet(tmp_path), *args])
    assert exit_info.value.code == 2
    err_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err_lines) == 1 and expected in err_lines[0], err_lines


def test_a_users_plugins_keep_the_safe_checkpoint_io(tmp_path):
    from pytorch_lightning.plugins.precision import DoublePrecision

    from seq2seq_attn.checkpointing import SafeCheckpointIO

    plugins = '[{"class_path": "pytorch_lightning.plugins.precision.DoublePrecision"}]'
    cli = make_cli(["--config", BASE, *quiet(tmp_path), "--trainer.plugins", plugins], run=False)
    assert isinstance(cli.trainer.strategy.checkpoint_io, SafeCheckpointIO)
    assert isinstance(cli.trainer.strategy.precision_plugin, DoublePrecision)


def test_config_file_typo_is_one_line(tmp_path, capsys):
    typo = tmp_path / "typo.yaml"
    typo.write_text("model:\n  atention: dot\n")
    with pytest.raises(SystemExit):
        main(["fit", "--config", BASE, "--config", str(typo), *quiet(tmp_path)])
    assert "unknown config key 'model.atention'; did you mean model.attention" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["fitt"]])
def test_unknown_or_missing_command_lists_all_commands(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "choose one of ['fit', 'validate', 'test', 'predict', 'ablate', 'cell', 'report', 'resume'" in err
    assert err.count("\n") == 1


def test_validation_logs_attention_saturation_per_head_to_csv(tmp_path):
    logger = {"class_path": "seq2seq_attn.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path), "name": "x"}}
    args = ["--trainer.logger", json.dumps(logger), "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "3", "--trainer.limit_val_batches", "2",
            "--trainer.val_check_interval", "3", "--model.flow", "luong", "--model.attention", "general",
            "--model.heads", "2"]  # fmt: skip
    run_cli(["fit", "--config", BASE, "--config", REVERSE, *args])
    with open(next(tmp_path.rglob("metrics.csv"))) as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("val/attn_saturated")]
    assert len(rows) == 1
    shares = [float(rows[0][f"val/attn_saturated_h{h}"]) for h in (1, 2)]
    assert all(0 <= s <= 1 for s in shares) and float(rows[0]["val/attn_saturated"]) == pytest.approx(sum(shares) / 2)
    ranges = [float(rows[0][f"val/score_range_h{h}"]) for h in (1, 2)]
    assert all(r > 0 for r in ranges) and float(rows[0]["val/score_range"]) > 0


def test_score_scale_reaches_the_scorer_and_a_bad_value_is_one_line(tmp_path, capsys):
    args = ["--config", BASE, "--config", REVERSE, *quiet(tmp_path), "--model.flow", "luong"]
    cli = make_cli([*args, "--model.attention", "general", "--model.score_scale", "sqrt_d"], run=False)
    assert cli.model.model.decoder.attention.scorer.scale == pytest.approx(128**-0.5)  # D = H = 2 x 64
    with pytest.raises(SystemExit) as stop:
        main(["fit", *args, "--model.attention", "general", "--model.score_scale", "sqrtd"])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and error.count("\n") == 0 and "model.score_scale" in error
    assert "'none', 'sqrt_d'" in error and "sqrtd" in error


def test_coverage_loss_from_switches_the_loss_on_for_the_last_part_of_training(tmp_path, monkeypatch, capsys):
    import seq2seq_attn.lit_module as lit_module

    weights, real_loss = [], lit_module.token_loss

    def recording(model, batch, smoothing, coverage_weight):
        weights.append(coverage_weight)
        return real_loss(model, batch, smoothing, coverage_weight)

    monkeypatch.setattr(lit_module, "token_loss", recording)
    args = [*quiet(tmp_path), "--trainer.max_steps", "10", "--trainer.limit_val_batches", "0", "--model.coverage",
            "true", "--model.coverage_loss", "0.5", "--model.coverage_loss_from", "0.7"]  # fmt: skip
    run_cli(["fit", "--config", BASE, "--config", REVERSE, *args])
    assert weights == [0.0] * 7 + [0.5] * 3
    weights.clear()  # 0.07 * 100 is 7.000000000000001 in floating point: still update 7
    run_cli(["fit", "--config", BASE, "--config", REVERSE, *args, "--trainer.max_steps", "100",
             "--model.coverage_loss_from", "0.07"])  # fmt: skip
    assert weights == [0.0] * 7 + [0.5] * 93
    stopping = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=train/loss"]
    with pytest.raises(SystemExit) as stop:  # early stopping never reaches the last part of a budget
        main(["fit", "--config", BASE, "--config", REVERSE, *args, *stopping])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "coverage_loss_from 0.7" in error and "early stopping" in error
    with pytest.raises(SystemExit) as stop:  # a schedule without a loss to schedule
        main(["fit", "--config", BASE, "--config", REVERSE, *quiet(tmp_path), "--model.coverage_loss_from", "0.7"])
    assert stop.value.code == 2
