"""--emit-sweep: a W&B sweep of the same grid whose agent commands run the same cells; report --runs."""

import csv
import itertools
import json
import shutil
from pathlib import Path

import yaml
from test_ablation import TINY
from wandb.sdk.launch.sweeps.utils import create_sweep_command_args, load_sweep_config

from seq2seq_attn.ablation.grid import Grid
from seq2seq_attn.ablation.runner import cell_args
from seq2seq_attn.ablation.sweep import cell_from_args
from seq2seq_attn.cli import main

ROOT = Path(__file__).resolve().parents[1]


def write_grid(tmp_path: Path) -> Path:
    grid = {
        "name": "sweepy",
        "configs": [str(ROOT / "experiments/base.yaml"), str(ROOT / "experiments/toy/reverse.yaml")],
        "fixed": TINY,
        "grid": {
            "model.attention": ["none", "dot"],
            "model.flow": ["none", "luong"],
            "model.input_feed": [True, False],
        },
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_emitted_sweep_is_a_wandb_grid_sweep_whose_agent_args_name_the_grid_cells(tmp_path, capsys):
    grid_path = write_grid(tmp_path)
    main(["ablate", str(grid_path), "--out", str(tmp_path / "out"), "--emit-sweep", str(tmp_path / "sweep.yaml")])
    assert "wandb agent" in capsys.readouterr().out
    sweep = load_sweep_config(str(tmp_path / "sweep.yaml"))  # wandb's own loader
    grid = Grid.load(grid_path)
    assert sweep["method"] == "grid" and sweep["metric"] == {"name": "test/exact_match", "goal": "maximize"}
    assert sweep["parameters"] == {k: {"values": v} for k, v in grid.grid.items()}
    assert sweep["command"][:4] == ["${env}", "seq2seq-attn", "cell", str(grid_path)]
    assert sweep["command"][-1] == "${args}" and str(tmp_path / "out") in sweep["command"]

    named, skipped = set(), 0
    keys = list(sweep["parameters"])
    for values in itertools.product(*(sweep["parameters"][k]["values"] for k in keys)):
        agent_args = create_sweep_command_args({"args": {k: {"value": v} for k, v in zip(keys, values)}})["args"]
        cell, reason = cell_from_args(grid, agent_args)  # what `wandb agent` passes: --model.flow=luong ...
        if cell is None:
            assert reason
            skipped += 1
        else:
            named.add(cell)
    assert named == set(grid.cells()[0]) and len(named) == 3  # none/none, dot/luong with and without feeding
    assert skipped == 4  # a scorer with flow none, or none with luong; none/none with either feed is one cell
    assert all("--wandb.group" in cell_args(grid, c) and "sweepy" in cell_args(grid, c) for c in named)


def test_agent_command_runs_one_cell_and_report_collects_runs(tmp_path, capsys):
    grid_path = write_grid(tmp_path)
    out = tmp_path / "out"
    main(["cell", str(grid_path), "--out", str(out), "--model.attention=dot", "--model.flow=luong",
          "--model.input_feed=False"])  # fmt: skip
    folder = out / "cells" / "attention=dot__flow=luong__input_feed=false"
    result = json.loads((folder / "result.json").read_text())
    assert result["meta"]["attention"] == "dot" and result["meta"]["input_feed"] is False
    main(["cell", str(grid_path), "--out", str(out), "--model.attention=dot", "--model.flow=none",
          "--model.input_feed=True"])  # fmt: skip
    assert "skipping" in capsys.readouterr().out

    runs = tmp_path / "runs" / "dot_luong" / "version_0"  # a tested run folder outside any ablation
    shutil.copytree(folder, runs)
    main(["report", str(tmp_path / "report"), "--runs", str(tmp_path / "runs")])
    with open(tmp_path / "report" / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["cell"] for r in rows} == {"dot_luong__version_0"}
    assert {r["attention"] for r in rows} == {"dot"} and {r["flow"] for r in rows} == {"luong"}
    exact = [r for r in rows if r["metric"] == "exact_match" and r["bucket"] == "all"]
    assert float(exact[0]["value"]) == result["overall"]["exact_match"]
    assert "luong + dot (no feed)" in (tmp_path / "report" / "summary.md").read_text()
