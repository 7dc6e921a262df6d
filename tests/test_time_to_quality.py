"""benchmarks/time_to_quality.py: the target from the reference cells, the first validation that reaches it."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "time_to_quality.py"


def cell(folder: Path, bleus: list[float], test_bleu: float, precision: str = "bf16-mixed", validating=None) -> Path:
    """A cell validated every 300 s; ``validating``: the seconds of each validation from the second one on."""
    folder.mkdir(parents=True)
    lines = [{"step": 400 * (i + 1), "seconds": 300.0 * (i + 1), "overall": {"bleu": b}} for i, b in enumerate(bleus)]
    for line in lines[1:] if validating is not None else []:
        line["validation_seconds"] = validating
    (folder / "val_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (folder / "result.json").write_text(json.dumps({"precision": precision, "stopped_by": "patience"}))
    (folder / "test_results.json").write_text(json.dumps({"overall": {"bleu": test_bleu}}))
    return folder


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_minutes_to_the_reference_best_less_half_a_bleu(tmp_path):
    today, recipe = tmp_path / "today" / "cells", tmp_path / "recipe" / "cells"
    a = cell(today / "a", [10.0, 15.0, 17.0, 18.0, 17.5], 19.0)  # best 18.0
    b = cell(today / "b", [11.0, 16.0, 17.9, 19.0, 18.0], 19.5)  # best 19.0: target (18 + 19) / 2 - 0.5 = 18.0
    fast = cell(recipe / "a", [14.0, 18.2, 18.1], 19.2, precision="32-true", validating=60.0)
    slow = cell(tmp_path / "peer", [9.0, 12.0, 17.99], 17.0)  # a peer's cell folder, not inside a study
    out = run("--reference", str(a), str(b), "--cells", str(a), str(b), str(fast), str(slow),
              "--json", str(tmp_path / "t.json"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    named = {r["cell"]: r for r in json.loads((tmp_path / "t.json").read_text())["rows"]}
    assert set(named) == {"today/a", "today/b", "recipe/a", f"{tmp_path.name}/peer"}  # the study tells the a's apart
    peer = named[f"{tmp_path.name}/peer"]
    rows = {"a": named["today/a"], "b": named["today/b"], "fast": named["recipe/a"], "slow": peer}
    assert json.loads((tmp_path / "t.json").read_text())["target"] == 18.0
    assert (rows["a"]["updates to target"], rows["a"]["minutes to target"]) == (1600, 20.0)
    assert (rows["b"]["updates to target"], rows["b"]["minutes to target"]) == (1600, 20.0)
    assert (rows["fast"]["updates to target"], rows["fast"]["minutes to target"]) == (800, 10.0)
    assert rows["slow"]["minutes to target"] is None and "not reached" in out.stdout
    assert rows["fast"]["precision"] == "32-true" and rows["fast"]["test BLEU"] == 19.2
    assert "target: dev BLEU 18.00" in out.stdout
    # where each cell stopped, and the clock to it: the time to a converged model
    assert (rows["a"]["last update"], rows["a"]["minutes to last"]) == (2000, 25.0) and "| 2,000 (25.0) |" in out.stdout
    assert (rows["fast"]["last update"], rows["fast"]["minutes to last"]) == (1200, 15.0)
    # the validations that record their seconds span 600 s of the clock, 120 of them validating
    assert rows["fast"]["validation share"] == 0.2 and rows["a"]["validation share"] is None and "| 20% |" in out.stdout


def test_a_folder_that_is_not_a_cell_is_named_in_one_line(tmp_path):
    out = run("--reference", str(tmp_path), "--cells", str(tmp_path))
    assert out.returncode != 0 and "no val_history.jsonl: pass finished cell folders" in out.stderr


def test_a_cell_without_dev_bleu_is_named_in_one_line(tmp_path):
    reference = cell(tmp_path / "a", [10.0, 18.0], 19.0)
    toy = tmp_path / "toy"  # a toy task's cell: its validations have a loss, no BLEU
    toy.mkdir()
    (toy / "val_history.jsonl").write_text(json.dumps({"step": 400, "seconds": 60.0, "overall": {"loss": 1.0}}) + "\n")
    out = run("--reference", str(reference), "--cells", str(reference), str(toy))
    assert out.returncode != 0 and "no dev BLEU in val_history.jsonl: pass cells of a text corpus" in out.stderr
    assert "Traceback" not in out.stderr


def test_early_stopping_replayed_as_lightning_decides_it(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("time_to_quality", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def history(bleus):
        return [{"step": 400 * (i + 1), "seconds": 60.0 * (i + 1), "overall": {"bleu": b}} for i, b in enumerate(bleus)]

    bleus = [10.0, 15.0, 15.04, 14.0, 15.2, 15.1, 15.0, 14.9, 15.25, 15.0]
    # patience 2: 15.04 is new, 14.0 waits, 15.2 is new, 15.1 and 15.0 wait: stops at the 7th validation
    assert script.stop_of(history(bleus), 2) == {"update": 2800, "seconds": 420.0, "best dev BLEU": 15.2,
                                                 "best update": 2000}  # fmt: skip
    assert script.stop_of(history(bleus), 3)["update"] == 3200 and script.stop_of(history(bleus), 4) is None
    # min_delta 0.1: 15.05 is no improvement on 15.0, so the wait goes on through it, yet best.ckpt holds it
    small = [10.0, 15.0, 15.05, 14.0, 14.0, 14.0, 16.0]
    assert script.stop_of(history(small), 4) is None
    assert script.stop_of(history(small), 4, 0.1) == {"update": 2400, "seconds": 360.0, "best dev BLEU": 15.05,
                                                      "best update": 1200}  # fmt: skip
    reference = cell(tmp_path / "a", bleus, 16.0)
    out = run("--reference", str(reference), "--cells", str(reference), "--stopping")
    assert out.returncode == 0, out.stderr
    assert "| cell 1 | not by 4,000 | 3,200 (40.0): 15.20 at 2,000 | 2,800 (35.0): 15.20 at 2,000 |" in out.stdout
