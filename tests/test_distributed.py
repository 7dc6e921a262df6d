"""DDP on 2 CPU processes (gloo): fit and test through both launchers; test counts every example once
and matches one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq_attn.cli import main

ROOT = Path(__file__).resolve().parents[1]


def args(run_dir: Path) -> list[str]:
    return [
        "--config", str(ROOT / "experiments/base.yaml"),
        "--config", str(ROOT / "experiments/toy/reverse.yaml"),
        "--data.init_args.train_size", "256",
        "--data.init_args.val_size", "32",
        "--data.init_args.test_size", "130",  # 9 batches of <= 16: one rank gets a repeated batch
        "--data.init_args.batch_size", "16",
        "--model.emb_size", "16",
        "--model.hidden_size", "16",
        "--model.beam_size", "2",
        "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(run_dir),
        "--trainer.logger.init_args.version", "0",
    ]  # fmt: skip


@pytest.mark.slow
def test_ddp_spawn_test_metrics_equal_one_process(tmp_path):
    main(["fit", *args(tmp_path)])
    run = tmp_path / "toy_reverse" / "version_0"
    ckpt = str(run / "checkpoints" / "best.ckpt")
    main(["test", *args(tmp_path), "--trainer.logger", "false", "--ckpt_path", ckpt])
    single = json.loads((run / "test_results.json").read_text())
    (run / "test_results.json").unlink()

    ddp = ["--trainer.strategy", "ddp_spawn", "--trainer.devices", "2", "--trainer.use_distributed_sampler", "false"]
    main(["test", *args(tmp_path), "--trainer.logger", "false", *ddp, "--ckpt_path", ckpt])
    both = json.loads((run / "test_results.json").read_text())

    assert both["overall"]["count"] == single["overall"]["count"] == 130  # each example once
    for key, value in single["overall"].items():
        assert both["overall"][key] == pytest.approx(value, rel=1e-6, abs=1e-6), key
    assert [b["count"] for b in both["buckets"]] == [b["count"] for b in single["buckets"]]
    for one, two in zip(single["buckets"], both["buckets"]):
        assert two["bucket"] == one["bucket"]
        for key, value in one.items():
            if key != "bucket":
                assert two[key] == pytest.approx(value, rel=1e-6, abs=1e-6), (one["bucket"], key)


def test_ddp_without_the_ddp_config_says_what_to_add(tmp_path, capsys):
    ddp = ["--trainer.strategy", "ddp_spawn", "--trainer.devices", "2", "--trainer.fast_dev_run", "true"]
    with pytest.raises(SystemExit) as stop:
        main(["fit", *args(tmp_path), *ddp])
    assert stop.value.code == 2
    assert "use_distributed_sampler: false" in capsys.readouterr().err


def console_script() -> str:
    """The installed ``seq2seq-attn`` entry point beside this interpreter (what a user runs)."""
    script = Path(sys.executable).parent / "seq2seq-attn"
    assert script.is_file(), f"{script} missing: the package is not installed (pip install -e .)"
    return str(script)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["ddp", "ddp_spawn"])
def test_ddp_fit_then_test_through_the_console_script(launcher, tmp_path):
    """2 CPU processes, both launchers: ``ddp`` starts rank 1 by running the console script again.
    A hang (a collective called by rank 0 alone) fails on the timeout instead of stalling CI."""
    ddp = ["--trainer.accelerator", "cpu", "--trainer.strategy", launcher, "--trainer.devices", "2",
           "--trainer.use_distributed_sampler", "false"]  # fmt: skip
    common = [*args(tmp_path), *ddp, "--trainer.max_epochs", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for command in (["fit"], ["test", "--ckpt_path", str(tmp_path / "toy_reverse/version_0/checkpoints/best.ckpt")]):
        run = subprocess.run(
            [console_script(), *command, *common], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
        )
        assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "toy_reverse/version_0/test_results.json").read_text())
    assert results["overall"]["count"] == 130  # every test example once across both processes
    assert (tmp_path / "toy_reverse/version_0/environment.json").is_file()
