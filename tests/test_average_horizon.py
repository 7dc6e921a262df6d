"""Several averaging horizons from one run (benchmarks/average_horizon.py): the snapshots are the averages that
validation would see, and training is untouched by them."""

import json
import sys
from pathlib import Path

import pytest
import torch

from seq2seq_attn.averaging import AverageSnapshots
from seq2seq_attn.checkpointing import LAST
from seq2seq_attn.cli import main
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.results import VAL_HISTORY

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import average_horizon  # noqa: E402
from test_translate import M30K  # noqa: E402


def callbacks(snapshots: bool = False) -> list[str]:
    chosen = [{"class_path": "seq2seq_attn.averaging.ExponentialAverage", "init_args": {"decay": 0.9}}]
    if snapshots:  # written into the run folder's average_snapshots
        chosen.append({"class_path": "seq2seq_attn.averaging.AverageSnapshots",
                       "init_args": {"warmups": [10, 4], "every": 4}})  # fmt: skip
    return ["--trainer.callbacks", json.dumps(chosen)]


def fit(out: Path, extra: list[str], steps: int = 8) -> None:
    main(["fit", *M30K, "--trainer.default_root_dir", str(out), "--trainer.max_steps", str(steps),
          "--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null", *extra])  # fmt: skip


def test_each_snapshot_is_the_average_validation_sees_and_scores_as_validation_does(tmp_path, monkeypatch, capsys):
    fit(tmp_path / "plain", callbacks())
    fit(tmp_path / "screen", callbacks(snapshots=True))
    plain = torch.load(tmp_path / "plain" / "checkpoints" / LAST, weights_only=True)
    screen = torch.load(tmp_path / "screen" / "checkpoints" / LAST, weights_only=True)
    snapshots = tmp_path / "screen" / "average_snapshots"
    # the snapshots change nothing the run trains, validates or checkpoints
    for key in ("state_dict", "current_model_state"):
        assert all(torch.equal(screen[key][k], v) for k, v in plain[key].items())
    # the validated average's warmup, carried again by the callback, is the checkpoint's average bit for bit
    same = torch.load(snapshots / "warmup10" / "step8.pt", weights_only=True)
    assert all(torch.equal(same[k], v) for k, v in screen["state_dict"].items())
    other = torch.load(snapshots / "warmup4" / "step8.pt", weights_only=True)
    assert any(not torch.equal(other[k], v) for k, v in screen["state_dict"].items())
    assert sorted(p.name for p in (snapshots / "warmup4").iterdir()) == ["step4.pt", "step8.pt"]

    # validated afterwards, warmup 10 repeats the run's own dev BLEU at each validation, to the last digit
    out = tmp_path / "horizons.json"
    monkeypatch.setattr(sys, "argv", ["average_horizon.py", str(tmp_path / "screen"), "--out", str(out)])
    average_horizon.main()
    scores = json.loads(out.read_text())
    validated = {}
    for line in (tmp_path / "screen" / VAL_HISTORY).read_text().splitlines():
        record = json.loads(line)
        validated[str(record["step"])] = record["overall"]["bleu"]
    assert set(validated) == {"4", "8"} and max(validated.values()) > 0
    assert scores["validated"] == validated and scores["warmup 10"] == validated
    assert set(scores["warmup 4"]) == {"4", "8"}
    assert "| update | validated | warmup 4 | warmup 10 |" in capsys.readouterr().out


def test_a_screen_refuses_to_resume_since_its_averages_are_not_checkpointed(tmp_path, capsys):
    fit(tmp_path / "screen", callbacks(snapshots=True))
    last = tmp_path / "screen" / "checkpoints" / LAST
    with pytest.raises(SystemExit) as stop:
        fit(tmp_path / "screen", [*callbacks(snapshots=True), "--ckpt_path", str(last)], steps=12)
    assert stop.value.code == 2
    assert "AverageSnapshots cannot resume a fit" in capsys.readouterr().err


def test_snapshots_need_the_validated_average_and_distinct_warmups(tmp_path, capsys):
    alone = [{"class_path": "seq2seq_attn.averaging.AverageSnapshots", "init_args": {"warmups": [10, 20]}}]
    with pytest.raises(SystemExit):
        fit(tmp_path / "alone", ["--trainer.callbacks", json.dumps(alone)])
    assert "add one seq2seq_attn.averaging.ExponentialAverage" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="distinct and above 1"):
        AverageSnapshots(warmups=[10, 10])
    with pytest.raises(ConfigError, match="positive number of updates"):
        AverageSnapshots(warmups=[10], every=0)
