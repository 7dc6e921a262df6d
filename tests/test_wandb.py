"""W&B: offline by default without an account, read back from its files; disabled mode; groups."""

from pathlib import Path

import pytest
from wandb_records import read_run

from seq2seq_attn.cli import main
from seq2seq_attn.loggers import run_keys, wandb_mode

ROOT = Path(__file__).resolve().parents[1]


def args(save_dir: Path) -> list[str]:
    return [
        "--config", str(ROOT / "experiments/base.yaml"),
        "--config", str(ROOT / "experiments/toy/reverse.yaml"),
        "--config", str(ROOT / "experiments/loggers/wandb.yaml"),
        "--data.init_args.train_size", "256",
        "--data.init_args.val_size", "32",
        "--data.init_args.test_size", "64",
        "--model.emb_size", "16",
        "--model.hidden_size", "16",
        "--model.flow", "luong",
        "--model.attention", "general",
        "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(save_dir),
    ]  # fmt: skip


@pytest.fixture
def no_account(tmp_path, monkeypatch):
    """No key, no netrc, no WANDB_MODE; every W&B folder in tmp."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    return tmp_path


@pytest.mark.slow
def test_offline_fit_and_test_log_everything_a_dashboard_needs(no_account):
    assert wandb_mode(None) == "offline"
    runs = no_account / "runs"
    main(["fit", *args(runs), "--wandb.group", "my_ablation"])
    fit_dir = runs / "toy_reverse" / "version_0"
    main(["test", *args(runs), "--ckpt_path", str(fit_dir / "checkpoints" / "best.ckpt")])

    fit = read_run(fit_dir)
    assert fit["job_type"] == "fit" and fit["group"] == "my_ablation"
    assert {"attention:general", "flow:luong", "cell:gru", "dataset:toy_reverse", "seed:1234"} <= set(fit["tags"])
    assert {"val/loss", "val/exact_match", "val/align_acc", "epoch", "trainer/global_step"} <= set(fit["history"])
    assert len(fit["history"]["val/loss"]) == 2  # per epoch
    assert fit["config"]["model.attention"] == "general" and fit["config"]["data.init_args.task"] == "reverse"
    assert {k: fit["config"][k] for k in ("attention", "flow", "cell", "dataset", "seed")} == {
        "attention": "general", "flow": "luong", "cell": "gru", "dataset": "toy_reverse", "seed": 1234,
    }  # fmt: skip
    heatmaps = [f for f in fit["files"] if f.startswith("files/media/images/val/attention")]
    assert len(heatmaps) == 2 * 4  # 4 fixed validation examples at each of 2 validations

    test = read_run(runs / "toy_reverse" / "version_1")
    assert test["job_type"] == "test"
    assert "test/buckets/_type" in test["history"] and test["history"]["test/buckets/_type"] == ["table-file"]
    assert test["history"]["test/buckets/nrows"] == [5]  # buckets 1-10, 11-15, ..., 26-30 of reverse.yaml
    assert "test/exact_match_vs_length_table/_type" in test["history"]
    assert "test/samples/_type" in test["history"]
    assert any(f.startswith("files/media/images/test/attention") for f in test["files"])
    assert {"test/exact_match", "test/loss", "test/align_acc"} <= set(test["summary"]) | set(test["history"])


def test_disabled_mode_runs_and_writes_no_wandb_files(no_account, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    runs = no_account / "runs"
    main(["fit", *args(runs), "--trainer.max_epochs", "1"])
    run_dir = runs / "toy_reverse" / "version_0"
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
    assert not list(run_dir.glob("wandb/offline-run-*"))


def test_run_keys_name_dataset_and_task():
    toy = {"model": {"attention": "dot", "flow": "luong", "input_feed": False, "cell": "lstm"}, "seed_everything": 3,
           "data": {"init_args": {"task": "sort"}}}  # fmt: skip
    assert run_keys(toy) == {"attention": "dot", "flow": "luong", "input_feed": False, "cell": "lstm",
                             "dataset": "toy_sort", "task": "sort", "seed": 3}  # fmt: skip
    text = {
        "model": {"flow": "bahdanau"},
        "data": {"init_args": {"corpus": "multi30k", "src_lang": "de", "trg_lang": "en"}},
    }
    assert run_keys(text)["dataset"] == "multi30k_de_en" and run_keys(text)["input_feed"] is None
