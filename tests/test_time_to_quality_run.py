"""benchmarks/time_to_quality_run.py: the cells it trains are the studies' cells, and each is ended at the target."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from seq2seq_attn.ablation.grid import Grid

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "time_to_quality_run.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("time_to_quality_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("recipe", ["converge", "fast"])
@pytest.mark.parametrize("model", ["general", "additive"])
def test_each_recipe_trains_the_cell_of_the_fast_recipe_grid(script, tmp_path, recipe, model):
    """The fast recipe's grid is the converge protocol's stack plus fast.yaml: converge drops fast.yaml alone."""
    ours = Grid.load(script.write_grid(tmp_path, recipe, model, seed=2))
    grid = Grid.load(ROOT / "experiments" / "ablations" / "bible_fast_recipe.yaml")
    (cell,) = ours.cells()[0]
    assert ours.configs == (grid.configs if recipe == "fast" else grid.configs[:-1]) and ours.fixed == grid.fixed
    assert grid.configs[-1].name == "fast.yaml" and cell in grid.cells()[0]


def test_a_seed_beyond_the_grid_keeps_the_grid_cell_and_changes_the_seed_alone(script, tmp_path):
    (ours,) = Grid.load(script.write_grid(tmp_path, "converge", "additive", seed=7)).cells()[0]
    cell = next(c for c in Grid.load(script.GRID).cells()[0] if c.as_dict()["model.attention"] == "additive")
    assert ours.as_dict() == {**cell.as_dict(), "seed_everything": 7}
    assert [key for key, _ in ours.overrides] == [key for key, _ in cell.overrides]  # the same cell folder name


def history(cell: Path, bleus: list[float], tail: str = "") -> None:
    cell.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 400 * (i + 1), "seconds": 60.0 * (i + 1), "overall": {"bleu": b}} for i, b in enumerate(bleus)]
    (cell / "val_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)


def test_a_half_written_validation_does_not_count(script, tmp_path):
    history(tmp_path, [10.0, 15.0], tail='{"step": 1200, "seconds": 180.0, "overall": {"bl')
    assert not script.reached(tmp_path, 16.0)
    history(tmp_path, [10.0, 15.0, 16.5])
    assert script.reached(tmp_path, 16.0) and not script.reached(tmp_path, 16.6)


FAKE_CELL = """
import json, os, sys, time
cell = sys.argv[1]
os.makedirs(cell, exist_ok=True)
open(os.path.join(cell, "pid"), "w").write(str(os.getpid()))
for i in range(1, 1000):  # a validation every 0.1 s, dev BLEU 2 higher each time, until killed
    with open(os.path.join(cell, "val_history.jsonl"), "a") as f:
        f.write(json.dumps({"step": 400 * i, "seconds": 60.0 * i, "overall": {"bleu": 2.0 * i}}) + "\\n")
    time.sleep(0.1)
"""


def test_a_cell_is_ended_at_its_first_validation_on_target(script, tmp_path, monkeypatch):
    grid_file = script.write_grid(tmp_path, "fast", "general", seed=1)
    out = tmp_path / "fast"
    cell = out / "cells" / Grid.load(grid_file).cells()[0][0].name
    out.mkdir()
    monkeypatch.setattr(script, "ablate_command", lambda grid, out: [sys.executable, "-c", FAKE_CELL, str(cell)])
    assert script.train_to(grid_file, out, goal=9.0, poll=0.05) == cell
    pid = int((cell / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # the process it started is gone
        os.kill(pid, 0)
    bleus = [json.loads(line)["overall"]["bleu"] for line in (cell / "val_history.jsonl").read_text().splitlines()]
    assert 10.0 in bleus and len(bleus) <= 7  # reached at the 5th validation, ended within a poll or two
    before = (cell / "val_history.jsonl").read_text()
    assert script.train_to(grid_file, out, goal=9.0) == cell  # run again: reached earlier, nothing launched
    assert (cell / "val_history.jsonl").read_text() == before


def test_a_failed_peer_run_is_one_line_naming_its_log(script, tmp_path):
    with pytest.raises(SystemExit) as stop:  # no OpenNMT-py in that folder: the peer's script fails
        script.run_onmt(tmp_path, tmp_path / "no_venv" / "bin", steps=400, seed=1)
    message = str(stop.value)
    assert message.startswith("OpenNMT-py's run failed (exit 1): see ") and "\n" not in message
    assert message.endswith(str(tmp_path / "onmt_work" / "run" / "stdout.log"))


def test_a_peer_below_the_target_gives_a_bound_not_a_ratio(script):
    fast = {"minutes to target": 21.0, "minutes to last": 75.0}
    assert script.ratio(fast, {"minutes to target": 42.0, "minutes to last": 57.0}) == "0.50×"
    below = {"minutes to target": None, "minutes to last": 105.0}
    assert script.ratio(fast, below) == "< 0.20× (it ended below the target after 105.0 minutes)"
    assert script.ratio(below, fast) == "-"
