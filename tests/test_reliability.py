"""Crash and resume with real processes and real kills; reproducibility; atomic checkpoints."""

import csv
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seq2seq_attn.ablation.cell import logger_args
from seq2seq_attn.checkpointing import resume_args
from seq2seq_attn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
# 640 examples in batches of 64: 10 steps an epoch, 3 epochs; dropout so the RNG state matters
TINY = [
    "--config", str(ROOT / "experiments/base.yaml"),
    "--config", str(ROOT / "experiments/toy/reverse.yaml"),
    "--data.init_args.train_size", "640",
    "--data.init_args.val_size", "128",
    "--data.init_args.test_size", "128",
    "--model.emb_size", "32",
    "--model.hidden_size", "32",
    "--model.dropout", "0.2",
    "--trainer.max_epochs", "3",
    "--trainer.deterministic", "true",
    "--trainer.enable_progress_bar", "false",
    "--last_checkpoint.every_n_steps", "5",
]  # fmt: skip


def run_cli(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "seq2seq_attn.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, **kwargs)


def fit(run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(["fit", *TINY, *logger_args(run_dir), *extra])


def callback(name: str, **init_args) -> list[str]:
    return ["--trainer.callbacks", json.dumps([{"class_path": f"faults.{name}", "init_args": init_args}])]


def val_losses(run_dir: Path) -> dict[int, float]:
    """Validation loss per epoch (a resumed run's later rows win)."""
    with open(run_dir / "metrics.csv") as handle:
        return {int(r["epoch"]): float(r["val/loss"]) for r in csv.DictReader(handle) if r.get("val/loss")}


def checkpoint_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    done = fit(run_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("kill_at, saved", [(17, 15), (10, 10)], ids=["mid-epoch", "epoch-boundary"])
def test_sigkill_then_resume_gives_the_same_final_val_loss(uninterrupted, tmp_path, kill_at, saved):
    killed = fit(tmp_path, *callback("KillAt", step=kill_at))  # in epoch 1 of 0-2 (10 steps each)
    assert killed.returncode == -signal.SIGKILL
    assert checkpoint_step(tmp_path / "checkpoints" / "last.ckpt") == saved
    assert set(val_losses(tmp_path)) == {0}  # the kill came before epoch 1's validation

    resumed = run_cli(["resume", str(tmp_path)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected, got = val_losses(uninterrupted), val_losses(tmp_path)
    assert sorted(got) == sorted(expected) == [0, 1, 2]
    assert got[2] == pytest.approx(expected[2], abs=1e-6)
    assert got[1] == pytest.approx(expected[1], abs=1e-6)
    assert checkpoint_step(tmp_path / "checkpoints" / "last.ckpt") == 30


@pytest.mark.slow
def test_a_kill_during_a_checkpoint_save_leaves_the_previous_one_intact(tmp_path):
    killed = fit(tmp_path, *callback("KillDuringSave", step=12))  # dies writing the step-15 checkpoint
    assert killed.returncode == -signal.SIGKILL
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert checkpoint_step(last) == 10  # the previous checkpoint, whole and loadable
    assert list((tmp_path / "checkpoints").glob(".last.ckpt.*.tmp"))  # the half-done save was a side file
    resumed = run_cli(["resume", str(tmp_path)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert checkpoint_step(last) == 30
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))


@pytest.mark.slow
def test_same_config_and_seed_give_identical_metrics_and_the_run_records_how(uninterrupted, tmp_path):
    again = fit(tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert val_losses(tmp_path) == val_losses(uninterrupted)  # exactly, not approximately
    first = torch.load(uninterrupted / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    second = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(first[k], second[k]) for k in first)
    environment = json.loads((tmp_path / "environment.json").read_text())
    assert environment["git_commit"] and len(environment["git_commit"]) == 40
    assert environment["packages"]["torch"] == torch.__version__
    assert environment["packages"]["pytorch-lightning"] and environment["python"]
    config = (tmp_path / "config.yaml").read_text()
    assert "seed_everything: 1234" in config and "dropout: 0.2" in config


def test_resume_explains_a_folder_it_cannot_resume(tmp_path):
    with pytest.raises(ConfigError, match="no config.yaml"):
        resume_args(tmp_path)
    (tmp_path / "config.yaml").write_text("trainer: {}\n")
    with pytest.raises(ConfigError, match="no checkpoints/last.ckpt.*seq2seq-attn fit --config"):
        resume_args(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    (tmp_path / "wandb_run.json").write_text('{"id": "abc123"}')
    assert resume_args(tmp_path)[-2:] == ["--wandb.id", "abc123"]  # the W&B run continues too


def cell_processes(out: Path) -> list[int]:
    """Live processes running a cell of this ablation (Linux /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "seq2seq_attn.ablation.cell" in text and str(out) in text:
            found.append(int(cmdline.parent.name))
    return found


@pytest.mark.slow
def test_a_killed_runner_reruns_only_missing_cells_and_a_diverging_cell_fails_cleanly(tmp_path):
    import yaml

    nan_in_seed_2 = [{"class_path": "faults.NaNAt", "init_args": {"step": 7, "seed": 2}}]
    fixed = {
        "trainer.max_epochs": 2,
        "data.init_args.train_size": 320,  # 5 steps an epoch
        "data.init_args.val_size": 32,
        "data.init_args.test_size": 32,
        "model.emb_size": 16,
        "model.hidden_size": 16,
        "last_checkpoint.every_n_steps": 2,
        "trainer.callbacks": nan_in_seed_2,
    }
    configs = [str(ROOT / "experiments/base.yaml"), str(ROOT / "experiments/toy/reverse.yaml")]
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "faults", "configs": configs, "fixed": fixed, "grid": {"seed_everything": [1, 2, 3]}})
    )
    out = tmp_path / "out"
    command = ["ablate", str(grid), "--out", str(out), "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    runner = subprocess.Popen([sys.executable, "-m", "seq2seq_attn.cli", *command], env=env, stdout=subprocess.DEVNULL)
    first = out / "cells" / "seed_everything=1" / "result.json"
    deadline = time.time() + 240
    while not first.is_file() and time.time() < deadline and runner.poll() is None:
        time.sleep(0.2)
    assert first.is_file()
    runner.kill()  # SIGKILL, in the middle of the grid
    runner.wait()
    time.sleep(1.0)
    assert cell_processes(out) == []  # the cell it was running died with it
    stamp = first.stat().st_mtime_ns

    again = run_cli(command)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "3 cells, 1 finished earlier, 0 failed earlier, 2 to run" in again.stdout
    assert first.stat().st_mtime_ns == stamp  # the finished cell did not run again

    failed = out / "cells" / "seed_everything=2"
    error = json.loads((failed / "error.json").read_text())["error"]
    assert "FloatingPointError" in error and "nan" in error.lower() and "last good checkpoint" in error
    assert "\n" not in error
    kept = torch.load(failed / "checkpoints" / "last.ckpt", weights_only=True)
    assert kept["global_step"] == 6 and all(torch.isfinite(t).all() for t in kept["state_dict"].values())
    assert "seed_everything=2: FAILED: FloatingPointError" in again.stdout

    with open(out / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["cell"] for r in rows} == {"seed_everything=1", "seed_everything=3"}
    keys = [(r["cell"], r["bucket"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys))  # no duplicated rows


class Payload:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def crafted(path):
    with open(path, "wb") as handle:
        pickle.dump({"state_dict": {}, "hyper_parameters": Payload(), "vocab": {}, "loops": Payload()}, handle)


def truncated(path):
    """The first 20 kB of a real checkpoint (a copy cut short by a full disk, say)."""
    from test_inference import save_checkpoint

    save_checkpoint(path.with_name("whole.ckpt"), emb_size=32, hidden_size=32)
    data = path.with_name("whole.ckpt").read_bytes()
    assert len(data) > 40_000
    path.write_bytes(data[:20_000])


@pytest.mark.parametrize("make", [crafted, truncated])
def test_unloadable_checkpoints_fail_in_one_line_on_every_loading_path(make, tmp_path, monkeypatch, capsys):
    from seq2seq_attn.checkpointing import SafeCheckpointIO
    from seq2seq_attn.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    bad = tmp_path / "run" / "checkpoints" / "last.ckpt"
    make(bad)
    shutil.copyfile(ROOT / "experiments" / "base.yaml", tmp_path / "run" / "config.yaml")
    (tmp_path / "src.txt").write_text("a b\n")

    with pytest.raises(ConfigError, match="cannot load .* safely"):  # Lightning's own loading (ablation cells)
        SafeCheckpointIO().load_checkpoint(bad)
    for command in (
        ["resume", "run"],
        ["fit", "--config", "run/config.yaml", "--ckpt_path", str(bad)],
        ["translate", "--ckpt", str(bad), "--input", "src.txt"],
        ["evaluate", "--ckpt", str(bad), "--src", "src.txt", "--ref", "src.txt"],
    ):
        with pytest.raises(SystemExit) as stop:
            main(command)
        assert stop.value.code == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith("error: cannot load")
        assert "run/checkpoints/last.ckpt" in errors[0]
    assert not (tmp_path / "PWNED").exists()
