"""The moving average of the weights: its formula, what a run validates and checkpoints, exact resumes."""

import sys
from pathlib import Path

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from seq2seq_attn.averaging import ExponentialAverage, ema_update
from seq2seq_attn.checkpointing import LAST
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.lightning_cli import make_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import fault_injection  # noqa: E402
from helpers import TOY_CONVERGE  # noqa: E402

TOY = [*TOY_CONVERGE, "--trainer.max_steps", "12", "--model.dropout", "0.1"]
AVERAGE = [
    "--trainer.callbacks",
    '[{"class_path": "seq2seq_attn.averaging.ExponentialAverage", "init_args": {"decay": 0.9}}]',
]


@pytest.mark.parametrize("warmup", [10.0, 4.0])
def test_the_average_follows_its_warmed_up_decay_and_equals_torchs_ema_once_capped(warmup):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    average = AveragedModel(model, multi_avg_fn=ema_update(0.9, warmup), use_buffers=False)
    expected = None
    for n in range(120):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        average.update_parameters(model)
        weights = [p.detach().clone() for p in model.parameters()]
        if expected is None:  # the first update copies the weights
            expected = weights
        else:
            d = min(0.9, (1 + n) / (warmup + n))  # n updates averaged before this one
            expected = [d * e + (1 - d) * w for e, w in zip(expected, weights)]
    assert all(torch.allclose(a, e, atol=1e-6) for a, e in zip(average.module.parameters(), expected))
    # past the warm-up ((1 + n) / (warmup + n) >= 0.9: from n = 80 for warmup 10) it is torch's own EMA step
    ours, torchs = [p.detach().clone() for p in average.module.parameters()], None
    torchs = [p.clone() for p in ours]
    current = [p.detach() for p in model.parameters()]
    ema_update(0.9, warmup)(ours, current, torch.tensor(200))
    get_ema_multi_avg_fn(0.9)(torchs, current, torch.tensor(200))
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs))


def test_a_run_validates_and_checkpoints_the_average_and_trains_the_same_raw_weights(tmp_path):
    plain = make_cli([*TOY, "--trainer.default_root_dir", str(tmp_path / "plain")], run=False)
    plain.trainer.fit(plain.model, datamodule=plain.datamodule)
    averaged = make_cli([*TOY, *AVERAGE, "--trainer.default_root_dir", str(tmp_path / "averaged")], run=False)
    averaged.trainer.fit(averaged.model, datamodule=averaged.datamodule)
    raw = torch.load(tmp_path / "plain" / "checkpoints" / LAST, weights_only=True)["state_dict"]
    checkpoint = torch.load(tmp_path / "averaged" / "checkpoints" / LAST, weights_only=True)
    assert checkpoint["global_step"] == 12
    # training is untouched: the raw weights are those of the run without averaging, bit for bit
    assert all(torch.equal(checkpoint["current_model_state"][k], raw[k]) for k in raw)
    # the checkpoint's weights (what test and load_model read) are the average, not the raw weights
    assert any(not torch.equal(checkpoint["state_dict"][k], raw[k]) for k in raw)
    average = next(c for c in averaged.trainer.callbacks if isinstance(c, ExponentialAverage))
    assert all(
        torch.equal(checkpoint["state_dict"][k], v) for k, v in average._average_model.module.state_dict().items()
    )
    # after fit the module holds the average, and a test in the same process scores the checkpoint's average,
    # not its raw weights (a rerun that only tests would read the average: both must score the same model)
    assert all(torch.equal(v, checkpoint["state_dict"][k]) for k, v in averaged.model.state_dict().items())
    averaged.trainer.test(
        averaged.model, datamodule=averaged.datamodule, ckpt_path=tmp_path / "averaged" / "checkpoints" / LAST
    )
    assert all(torch.equal(v, checkpoint["state_dict"][k]) for k, v in averaged.model.state_dict().items())
    assert tuple(checkpoint["callbacks"]["ExponentialAverage"][k] for k in ("decay", "warmup")) == (0.9, 10.0)


def test_a_killed_averaging_cell_ends_as_the_uninterrupted_one(tmp_path):
    # after a validation; mid-update; mid-test (a rerun then only tests, in a process that did not fit)
    points = [fault_injection.KILL_POINTS[i] for i in (3, 0, 7)]
    rows = fault_injection.check(points, tmp_path, (fault_injection.average(0.9),))
    assert [(r["point"], r["differences"], r["attempts"]) for r in rows] == [(p.name, [], 2) for p in points]


def test_a_bad_decay_and_a_resume_with_another_decay_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"decay must be in \(0, 1\), got 1.0"):
        ExponentialAverage(1.0)
    with pytest.raises(ConfigError, match="warmup must be above 1, got 1.0"):
        ExponentialAverage(0.99, warmup=1.0)
    run = make_cli([*TOY, *AVERAGE, "--trainer.default_root_dir", str(tmp_path)], run=False)
    run.trainer.fit(run.model, datamodule=run.datamodule)
    other = [*TOY, "--trainer.max_steps", "16", "--trainer.default_root_dir", str(tmp_path), "--trainer.callbacks",
             '[{"class_path": "seq2seq_attn.averaging.ExponentialAverage", "init_args": {"decay": 0.99}}]']  # fmt: skip
    again = make_cli(other, run=False)
    with pytest.raises(ConfigError, match="averaged its weights with decay 0.9, the config says 0.99"):
        again.trainer.fit(again.model, datamodule=again.datamodule, ckpt_path=tmp_path / "checkpoints" / LAST)


def test_resuming_an_averaged_checkpoint_without_its_callback_is_a_one_line_error_and_testing_it_is_not(tmp_path):
    run = make_cli([*TOY, *AVERAGE, "--trainer.default_root_dir", str(tmp_path)], run=False)
    run.trainer.fit(run.model, datamodule=run.datamodule)
    plain = make_cli([*TOY, "--trainer.max_steps", "16", "--trainer.default_root_dir", str(tmp_path)], run=False)
    with pytest.raises(ConfigError, match="resume it with its averaging callback in trainer.callbacks"):
        plain.trainer.fit(plain.model, datamodule=plain.datamodule, ckpt_path=tmp_path / "checkpoints" / LAST)
    tester = make_cli([*TOY, "--trainer.default_root_dir", str(tmp_path / "test")], run=False)
    tester.trainer.test(tester.model, datamodule=tester.datamodule, ckpt_path=tmp_path / "checkpoints" / LAST)
    average = torch.load(tmp_path / "checkpoints" / LAST, weights_only=True)["state_dict"]
    assert all(torch.equal(v, average[k]) for k, v in tester.model.state_dict().items())
