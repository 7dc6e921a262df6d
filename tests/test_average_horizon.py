"""Several averaging horizons from one run (benchmarks/average_horizon.py): the snapshots are the averages that
validation would see, and training is untouched by them."""

import json
import sys
from pathlib import Path

import torch

from seq2seq_attn.checkpointing import LAST
from seq2seq_attn.cli import main
from seq2seq_attn.results import VAL_HISTORY

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import average_horizon  # noqa: E402
from test_translate import M30K  # noqa: E402


def callbacks(snapshots: Path = None) -> list[str]:
    chosen = [{"class_path": "seq2seq_attn.averaging.ExponentialAverage", "init_args": {"decay": 0.9}}]
    if snapshots is not None:
        chosen.append({"class_path": "average_horizon.AverageSnapshots",
                       "init_args": {"warmups": [10, 4], "every": 4, "decay": 0.9, "out": str(snapshots)}})  # fmt: skip
    return ["--trainer.callbacks", json.dumps(chosen)]


def fit(out: Path, extra: list[str]) -> None:
    main(["fit", *M30K, "--trainer.default_root_dir", str(out), "--trainer.max_steps", "8",
          "--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null", *extra])  # fmt: skip


def test_each_snapshot_is_the_average_validation_sees_and_scores_as_validation_does(tmp_path, monkeypatch, capsys):
    fit(tmp_path / "plain", callbacks())
    fit(tmp_path / "screen", callbacks(tmp_path / "snapshots"))
    plain = torch.load(tmp_path / "plain" / "checkpoints" / LAST, weights_only=True)
    screen = torch.load(tmp_path / "screen" / "checkpoints" / LAST, weights_only=True)
    # the snapshots change nothing the run trains, validates or checkpoints
    for key in ("state_dict", "current_model_state"):
        assert all(torch.equal(screen[key][k], v) for k, v in plain[key].items())
    # the validated average's warmup, carried again by the callback, is the checkpoint's average bit for bit
    same = torch.load(tmp_path / "snapshots" / "warmup10" / "step8.pt", weights_only=True)
    assert all(torch.equal(same[k], v) for k, v in screen["state_dict"].items())
    other = torch.load(tmp_path / "snapshots" / "warmup4" / "step8.pt", weights_only=True)
    assert any(not torch.equal(other[k], v) for k, v in screen["state_dict"].items())
    assert sorted(p.name for p in (tmp_path / "snapshots" / "warmup4").iterdir()) == ["step4.pt", "step8.pt"]

    # scored afterwards, warmup 10 repeats the run's own dev BLEU at each validation
    out = tmp_path / "horizons.json"
    monkeypatch.setattr(sys, "argv", ["average_horizon.py", str(tmp_path / "screen"), str(tmp_path / "snapshots"),
                                      "--threads", "1", "--out", str(out)])  # fmt: skip
    average_horizon.main()
    scores = json.loads(out.read_text())
    validated = {}
    for line in (tmp_path / "screen" / VAL_HISTORY).read_text().splitlines():
        record = json.loads(line)
        validated[str(record["step"])] = record["overall"]["bleu"]
    assert set(validated) == {"4", "8"} and scores["10"] == validated
    assert set(scores["4"]) == {"4", "8"} and scores["4"] != scores["10"]
    assert "| update | validated | warmup 4 | warmup 10 |" in capsys.readouterr().out
