"""A killed cell comes back exactly under early stopping: the checkpoint/validation order, the stop decision,
a rerun with a higher cap, the learning curve's records, configs the dry run must reject, old checkpoints.
The fault-injection harness (benchmarks/fault_injection.py) kills real cell processes at every point."""

import json
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks.early_stopping import EarlyStoppingReason

from seq2seq_attn.checkpointing import LAST
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.lightning_cli import make_cli
from seq2seq_attn.results import keep_history_until

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fault_injection  # noqa: E402
from helpers import TOY_CONVERGE  # noqa: E402

TOY = TOY_CONVERGE


def stopping(patience: int = 1, min_delta: float = 0.0) -> list[str]:
    callback = {
        "class_path": "pytorch_lightning.callbacks.EarlyStopping",
        "init_args": {"monitor": "val/loss", "mode": "min", "patience": patience, "min_delta": min_delta},
    }
    return ["--trainer.callbacks", json.dumps([callback])]  # fmt: skip


class ReadLastCheckpoint(pl.Callback):
    """Reads last.ckpt as the update after ``step`` starts (what a kill then would resume from), and what
    early stopping holds at that moment."""

    def __init__(self, step: int) -> None:
        self.step, self.seen, self.best_score = step, None, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            self.seen = torch.load(Path(trainer.default_root_dir) / "checkpoints" / LAST, weights_only=True)
            stop = next(c for c in trainer.callbacks if isinstance(c, pl.callbacks.EarlyStopping))
            self.best_score = stop.best_score.clone()


def early_stopping_state(checkpoint: dict) -> dict:
    return next(v for k, v in checkpoint["callbacks"].items() if k.startswith("EarlyStopping"))


def test_the_checkpoint_at_a_validations_update_holds_what_early_stopping_made_of_it(tmp_path):
    args = [*TOY, *stopping(patience=100), "--trainer.max_steps", "9", "--trainer.default_root_dir", str(tmp_path)]
    cli = make_cli(args, run=False)
    reader = ReadLastCheckpoint(step=8)
    cli.trainer.callbacks.append(reader)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    # saved after the validation at update 8, not before it (a resume would skip that validation): early
    # stopping's best in the checkpoint is the one it holds after that validation, the best dev loss so far
    history = [json.loads(line) for line in (tmp_path / "val_history.jsonl").open()]
    assert reader.seen["global_step"] == 8 and [h["step"] for h in history] == [4, 8]
    assert early_stopping_state(reader.seen)["best_score"] == reader.best_score
    assert float(reader.best_score) == pytest.approx(min(h["overall"]["loss"] for h in history))


def test_a_run_that_early_stopping_ended_stays_ended_when_resumed(tmp_path):
    args = [*TOY, *stopping(patience=1, min_delta=10.0), "--trainer.default_root_dir", str(tmp_path)]
    cli = make_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    stopped_at = cli.trainer.global_step
    assert stopped_at == 8  # no gain of 10 nats at update 8: patience 1 is spent
    history = (tmp_path / "val_history.jsonl").read_text()
    again = make_cli(args, run=False)
    again.trainer.fit(again.model, datamodule=again.datamodule, ckpt_path=tmp_path / "checkpoints" / LAST)
    assert again.trainer.global_step == stopped_at and (tmp_path / "val_history.jsonl").read_text() == history
    stop = next(c for c in again.trainer.callbacks if isinstance(c, pl.callbacks.EarlyStopping))
    assert stop.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED


def test_a_resumed_history_keeps_the_validations_up_to_its_checkpoint_and_drops_a_cut_line(tmp_path):
    path = tmp_path / "val_history.jsonl"
    lines = [json.dumps({"step": s, "seconds": s * 10.0, "overall": {}}) for s in (4, 8, 12)]
    path.write_text("\n".join(lines) + '\n{"step": 16, "seco')
    keep_history_until(path, 8)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [4, 8]
    keep_history_until(tmp_path / "none.jsonl", 8)  # nothing to cut: nothing happens
    assert not (tmp_path / "none.jsonl").exists()


def test_a_cell_that_hit_its_cap_trains_on_when_run_again_with_a_higher_cap(tmp_path):
    from seq2seq_attn.ablation.cell import run_and_record

    cell = tmp_path / "cell"
    base = [*TOY, *stopping(patience=100)]
    assert run_and_record(cell, [*base, "--trainer.max_steps", "8"]) == 0
    first = json.loads((cell / "result.json").read_text())
    assert first["steps"] == 8 and first["hit_cap"].startswith("reached trainer.max_steps at update 8")
    (cell / "result.json").unlink()
    assert run_and_record(cell, [*base, "--trainer.max_steps", "12"]) == 0
    second = json.loads((cell / "result.json").read_text())
    assert second["steps"] == 12 and second["hit_cap"].startswith("reached trainer.max_steps at update 12")
    assert [json.loads(line)["step"] for line in (cell / "val_history.jsonl").open()] == [4, 8, 12]
    # the same caps again: the recorded training is tested again, not trained again
    (cell / "result.json").unlink()
    assert run_and_record(cell, [*base, "--trainer.max_steps", "12"]) == 0
    assert {k: v for k, v in json.loads((cell / "result.json").read_text()).items() if k != "test_seconds"} == {
        k: v for k, v in second.items() if k != "test_seconds"
    }


def test_the_dry_run_rejects_the_coverage_schedule_under_early_stopping(tmp_path):
    from seq2seq_attn.lightning_cli import check_config

    coverage = ["--model.coverage", "true", "--model.coverage_loss", "1.0", "--model.coverage_loss_from", "0.5"]
    with pytest.raises(ConfigError, match="coverage_loss_from 0.5 is a share of a fixed budget"):
        check_config([*TOY, *stopping(), *coverage])
    check_config([*TOY, *coverage])  # without early stopping it is a valid schedule
    plugin = json.dumps({"class_path": "pytorch_lightning.plugins.io.TorchCheckpointIO"})
    with pytest.raises(ConfigError, match="trainer.plugins sets its own checkpoint IO"):
        check_config([*TOY, "--trainer.plugins", plugin])


def test_a_typo_under_data_init_args_names_the_key_and_the_closest_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'data.init_args.val_sise'; did you mean "
                                          r"data.init_args.val_size"):  # fmt: skip
        make_cli([*TOY, "--data.init_args.val_sise", "8"], run=False)
    typo = tmp_path / "typo.yaml"
    typo.write_text("data:\n  init_args:\n    train_sise: 8\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'data.init_args.train_sise'; did you mean"):
        make_cli([*TOY, "--config", str(typo)], run=False)


def test_a_local_p_checkpoint_from_before_the_bounded_centre_is_refused_on_every_path(tmp_path):
    from seq2seq_attn.inference import load_model

    cli = make_cli([*TOY, "--model.flow", "luong", "--model.attention", "general", "--model.alignment", "local-p",
                    "--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path)], run=False)  # fmt: skip
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    path = tmp_path / "checkpoints" / LAST
    assert load_model(path).hparams.alignment == "local-p"  # today's checkpoints load
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["hyper_parameters"]["score_scale"]  # as saved before the centre was bounded
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    with pytest.raises(ConfigError, match="local-p attention trained when its centre p_t could reach one past"):
        load_model(old)
    with pytest.raises(ConfigError, match="local-p attention trained when its centre"):
        cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=old)


@pytest.mark.parametrize("number", [3])  # a kill after a validation, before the next checkpoint
def test_a_cell_killed_after_a_validation_ends_as_the_uninterrupted_one(tmp_path, number):
    point = fault_injection.KILL_POINTS[number]
    [row] = fault_injection.check([point], tmp_path)
    assert row["attempts"] == point.attempts and row["differences"] == []


@pytest.mark.slow
def test_every_kill_point_ends_as_the_uninterrupted_cell(tmp_path):
    rows = fault_injection.check(fault_injection.KILL_POINTS, tmp_path)
    assert [(r["point"], r["differences"]) for r in rows] == [(p.name, []) for p in fault_injection.KILL_POINTS]
    assert [r["attempts"] for r in rows] == [p.attempts for p in fault_injection.KILL_POINTS]
