"""The ablation runner end to end: outputs, resumability, failures; alignment metrics."""

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from seq2seq_attn.ablation.grid import Grid
from seq2seq_attn.ablation.runner import ablate
from seq2seq_attn.cli import main
from seq2seq_attn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "trainer.max_epochs": 1,
    "data.init_args.train_size": 128,
    "data.init_args.val_size": 16,
    "data.init_args.test_size": 32,
    "data.init_args.train_lengths": [3, 6],
    "data.init_args.test_lengths": [3, 12],
    "model.emb_size": 8,
    "model.hidden_size": 8,
    "model.test_buckets": [6, 9],
}


def write_grid(tmp_path, grid, fixed=TINY):
    path = tmp_path / "grid.yaml"
    configs = [str(ROOT / "experiments" / "base.yaml"), str(ROOT / "experiments" / "toy" / "reverse.yaml")]
    path.write_text(yaml.safe_dump({"name": "tiny", "configs": configs, "fixed": fixed, "grid": grid}))
    return path


def cell_names(out):
    return sorted(p.name for p in (out / "cells").iterdir())


def test_grid_skips_invalid_and_duplicate_cells(tmp_path):
    grid = Grid.load(
        write_grid(
            tmp_path,
            {
                "model.attention": ["none", "dot"],
                "model.flow": ["none", "bahdanau", "luong"],
                "model.input_feed": [True, False],
            },
        )
    )
    cells, skipped = grid.cells()
    names = [c.name for c in cells]
    assert names == [
        "attention=none__flow=none",
        "attention=dot__flow=bahdanau",
        "attention=dot__flow=luong__input_feed=true",
        "attention=dot__flow=luong__input_feed=false",
    ]
    reasons = " ".join(reason for _, reason in skipped)
    assert "takes no scorer" in reasons and "bottleneck baseline" in reasons and "only matters" in reasons


def test_grid_runs_the_multi_head_attention_once_for_its_three_scorer_names(tmp_path):
    grid = Grid.load(write_grid(tmp_path, {"model.attention": ["dot", "general", "scaled_dot"], "model.heads": [1, 4]}))
    cells, skipped = grid.cells()
    assert [c.name for c in cells] == ["attention=dot__heads=1", "attention=dot__heads=4", "attention=general__heads=1",
                                       "attention=scaled_dot__heads=1"]  # fmt: skip
    assert [c.name for c, _ in skipped] == ["attention=general__heads=4", "attention=scaled_dot__heads=4"]
    assert all("one multi-head attention" in reason for _, reason in skipped)


def test_a_list_of_sub_grids_runs_the_union_of_their_products(tmp_path):
    grid_file = tmp_path / "union.yaml"
    grid_file.write_text(
        "configs: [" + str(ROOT / "experiments/base.yaml") + "]\n"
        "grid:\n"
        "  - {model.flow: [none], model.attention: [none], seed_everything: [1, 2]}\n"
        "  - {model.flow: [luong], model.attention: [dot], model.input_feed: [true], seed_everything: [1]}\n"
        "  - {model.flow: [none], model.attention: [none], seed_everything: [2]}\n"  # already there: once
    )
    grid = Grid.load(grid_file)
    cells, skipped = grid.cells()
    assert [c.name for c in cells] == [
        "flow=none__attention=none__seed_everything=1",
        "flow=none__attention=none__seed_everything=2",
        "flow=luong__attention=dot__input_feed=true__seed_everything=1",
    ]
    assert len(skipped) == 1
    assert grid.grid == {"model.flow": ["none", "luong"], "model.attention": ["none", "dot"],
                         "seed_everything": [1, 2], "model.input_feed": [True]}  # fmt: skip


def test_bad_grid_files_fail_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngrids: {model.flow: [luong]}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        Grid.load(bad)
    with pytest.raises(ConfigError, match="not found"):
        Grid.load(tmp_path / "missing.yaml")
    for panels in ("[luong]", "{recurrent: luong + *}", "{recurrent: []}"):
        bad.write_text(f"name: x\ngrid: {{model.flow: [luong]}}\npanels: {panels}\n")
        with pytest.raises(ConfigError, match="'panels:' in .* must map each panel's title to a list"):
            Grid.load(bad)
    bad.write_text("name: x\ngrid: {model.flow: [luong]}\npanels: {recurrent: ['luong + *'], other: [transformer]}\n")
    assert Grid.load(bad).panels == {"recurrent": ["luong + *"], "other": ["transformer"]}
    for compare in ("luong", "[]", "[[luong]]", "[[a, b, c]]", "[{a: b}]"):
        bad.write_text(f"name: x\ngrid: {{model.flow: [luong]}}\ncompare: {compare}\n")
        with pytest.raises(ConfigError, match="'compare:' in .* must list model-label patterns"):
            Grid.load(bad)
    bad.write_text("name: x\ngrid: {model.flow: [luong]}\ncompare: ['luong + *', [transformer, 'luong + dot']]\n")
    assert Grid.load(bad).compare == ["luong + *", ["transformer", "luong + dot"]]


@pytest.mark.slow
def test_two_by_two_grid_runs_resumes_and_reports(tmp_path, capsys):
    grid = write_grid(tmp_path, {"model.attention": ["additive", "dot"], "model.flow": ["bahdanau", "luong"]})
    out = tmp_path / "out"
    ablate(str(grid), str(out), jobs=2)
    assert len(cell_names(out)) == 4
    for name in ("results.csv", "summary.md", "degradation.png", "attention.png", "grid.yaml"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["cell"] for r in rows} == set(cell_names(out))
    assert {"attention", "flow", "bucket", "metric", "value", "count", "extrapolation"} <= set(rows[0])
    assert {r["bucket"] for r in rows} == {"all", "1-6", "7-9", "10+"}
    assert {r["extrapolation"] for r in rows if r["bucket"] == "10+"} == {"True"}
    assert {"exact_match", "align_acc", "attn_entropy", "attn_saturated", "score_range"} <= {r["metric"] for r in rows}
    summary = (out / "summary.md").read_text()
    assert "bahdanau + additive" in summary and "10+ †" in summary
    assert "## attention rows with a weight above 0.99" in summary and "## median attention score range" in summary
    stamps = {n: (out / "cells" / n / "result.json").stat().st_mtime_ns for n in cell_names(out)}

    capsys.readouterr()
    ablate(str(grid), str(out), jobs=2)  # everything is there: nothing runs
    assert "0 to run" in capsys.readouterr().out
    assert stamps == {n: (out / "cells" / n / "result.json").stat().st_mtime_ns for n in cell_names(out)}

    rerun = "attention=dot__flow=luong"
    (out / "cells" / rerun / "result.json").unlink()
    ablate(str(grid), str(out), jobs=2)
    assert "1 to run" in capsys.readouterr().out
    after = {n: (out / "cells" / n / "result.json").stat().st_mtime_ns for n in cell_names(out)}
    assert [n for n in after if after[n] != stamps[n]] == [rerun]
    with open(out / "results.csv") as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)  # rewritten, not appended

    (out / "summary.md").unlink()
    main(["report", str(out)])
    assert (out / "summary.md").read_text() == summary

    # a cell added to the folder after the grid ran (a peer's, a moved one) is in the next report
    peer = out / "cells" / "system=peer__attention=dot__flow=luong"
    shutil.copytree(out / "cells" / rerun, peer)
    overrides = json.loads((peer / "cell.json").read_text())["overrides"]
    (peer / "cell.json").write_text(json.dumps({"name": peer.name, "overrides": {"system": "peer", **overrides}}))
    main(["report", str(out)])
    with open(out / "results.csv") as handle:
        assert {r["cell"] for r in csv.DictReader(handle)} == {*cell_names(out)} and peer.name in cell_names(out)
    assert "luong + dot, system=peer" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_a_failing_cell_is_recorded_and_the_rest_complete(tmp_path, capsys):
    grid = write_grid(tmp_path, {"data.init_args.num_symbols": [6, 1]})
    out = tmp_path / "out"
    ablate(str(grid), str(out), jobs=1)
    printed = capsys.readouterr().out
    assert "num_symbols=1: FAILED: ConfigError: toy sizes must be positive" in printed
    assert (out / "cells" / "num_symbols=6" / "result.json").is_file()
    error = json.loads((out / "cells" / "num_symbols=1" / "error.json").read_text())
    assert "num_symbols=1" in error["error"] and "\n" not in error["error"]
    assert "num_symbols=1" in (out / "summary.md").read_text()  # listed under failed cells
    ablate(str(grid), str(out), jobs=1)  # a failure is not retried unless asked
    assert "1 failed earlier (rerun with --retry-failed), 0 to run" in capsys.readouterr().out


@pytest.mark.slow
def test_a_cell_cut_by_the_time_cap_is_flagged_not_passed_off_as_the_budget(tmp_path, capsys):
    capped = {**TINY, "trainer.max_epochs": 1000, "trainer.max_steps": 100000, "trainer.max_time": "00:00:00:02"}
    out = tmp_path / "out"
    ablate(str(write_grid(tmp_path, {"model.attention": ["dot"]}, fixed=capped)), str(out), jobs=1)
    result = json.loads((out / "cells" / "attention=dot" / "result.json").read_text())
    assert 0 < result["steps"] < 100000
    assert result["stopped_short"] == f"stopped at update {result['steps']} of 100000 by trainer.max_time"
    assert f"WARNING: stopped at update {result['steps']} of 100000" in capsys.readouterr().out
    summary = (out / "summary.md").read_text()
    assert "## Cells that stopped short of their budget" in summary and "`attention=dot`" in summary

    ablate(str(write_grid(tmp_path, {"model.attention": ["general"]})), str(tmp_path / "full"), jobs=1)
    full = json.loads((tmp_path / "full" / "cells" / "attention=general" / "result.json").read_text())
    assert full["stopped_short"] is None  # max_epochs 1 and no max_steps: the budget is the epochs
    assert "stopped short" not in (tmp_path / "full" / "summary.md").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "experiments" / "ablations").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_grid_loads_and_expands(path):
    grid = Grid.load(path)
    cells, skipped = grid.cells()
    assert cells and all(c.is_file() for c in grid.configs)
    # the baseline is in every grid but those comparing attention variants, the scorer grid, whose
    # bottleneck cells are the converged study's (linked into its published folder, not trained again), and
    # the fast recipe's grid and screens, which compare training recipes on attention models
    recipes = ("bible_fast_recipe", "bible_average_horizon", "bible_fast_schedule")
    if "variants" not in path.stem and path.stem != "bible_scorers" and path.stem not in recipes:
        assert any(dict(c.overrides).get("model.attention") == "none" for c in cells)


def test_dry_run_lists_cells_and_runs_nothing(tmp_path, capsys):
    grid = write_grid(tmp_path, {"model.attention": ["none", "general"], "model.flow": ["none", "luong"]})
    main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--dry-run"])
    printed = capsys.readouterr().out
    assert "would run attention=none__flow=none" in printed and "would run attention=general__flow=luong" in printed
    assert not (tmp_path / "out").exists()


def test_dry_run_validates_every_cell_and_names_the_bad_key(tmp_path, capsys):
    grid = write_grid(tmp_path, [{"model.attention": ["general"]}, {"model.atention": ["dot"]},
                                 {"model.attention": ["additive"], "model.score_scale": ["sqrt_d"]}])  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--dry-run"])
    captured = capsys.readouterr()
    assert stop.value.code == 2 and "2 of the 3 cells to run have invalid configurations" in captured.err
    assert "would run attention=general" in captured.out
    assert "INVALID atention=dot: unknown config key 'model.atention'; did you mean model.attention," in captured.out
    assert "INVALID attention=additive__score_scale=sqrt_d: score_scale 'sqrt_d' divides" in captured.out
    assert not (tmp_path / "out").exists()


def test_report_without_results_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path)])
    assert exit_info.value.code == 2 and "no results.csv in" in capsys.readouterr().err


def test_model_labels_name_what_tells_cells_apart():
    import pandas as pd

    from seq2seq_attn.ablation.report import with_labels

    nan = float("nan")
    rows = [  # arch, flow, attention, coverage, num_layers, heads, seed
        (nan, "none", "none", nan, nan, nan, 1),
        (nan, "bahdanau", "additive", nan, nan, nan, 1),
        (nan, "bahdanau", "additive", True, nan, nan, 1),
        (nan, "luong", "general", nan, nan, 4.0, 1),
        ("transformer", nan, nan, nan, 3.0, 4.0, 1),
        ("transformer", nan, nan, nan, 3.0, 4.0, 2),
    ]
    columns = ["arch", "flow", "attention", "coverage", "num_layers", "heads", "seed_everything"]
    df = pd.DataFrame(rows, columns=columns).assign(cell="c", metric="bleu", value=1.0)
    labels = with_labels(df)["model"].tolist()
    assert labels == [
        "none (no attention)",
        "bahdanau + additive",
        "bahdanau + additive, coverage=True",
        "luong + general, heads=4",
        "transformer",  # what every Transformer cell shares is its architecture, not a difference
        "transformer",
    ]
    df.loc[5, "num_layers"] = 6.0  # two Transformer sizes: their labels say which is which
    assert with_labels(df)["model"].tolist()[4:] == ["transformer, num_layers=3", "transformer, num_layers=6"]
    # a grid axis the RNN cells vary along stays in the Transformer's label, though its cells share it
    df["train_max_words"] = [30, 50, 50, 50, 50, 50]
    assert with_labels(df)["model"].tolist() == [
        "none (no attention), train_max_words=30",
        "bahdanau + additive, train_max_words=50",
        "bahdanau + additive, coverage=True, train_max_words=50",
        "luong + general, heads=4, train_max_words=50",
        "transformer, num_layers=3, train_max_words=50",
        "transformer, num_layers=6, train_max_words=50",
    ]


def early_stopping(patience: int, monitor: str = "val/loss", mode: str = "min") -> list[dict]:
    return [{"class_path": "pytorch_lightning.callbacks.EarlyStopping",
             "init_args": {"monitor": monitor, "mode": mode, "patience": patience}}]  # fmt: skip


@pytest.mark.slow
def test_cells_say_whether_patience_or_a_cap_stopped_them(tmp_path, capsys):
    converge = {**TINY, "trainer.max_epochs": 60, "trainer.callbacks": early_stopping(1, "val/exact_match", "max"),
                "best_checkpoint.monitor": "val/exact_match", "best_checkpoint.mode": "max"}  # fmt: skip
    out = tmp_path / "out"
    ablate(str(write_grid(tmp_path, {"model.attention": ["dot"]}, fixed=converge)), str(out), jobs=1)
    result = json.loads((out / "cells" / "attention=dot" / "result.json").read_text())
    history = [json.loads(line) for line in (out / "cells" / "attention=dot" / "val_history.jsonl").open()]
    scores = [h["overall"]["exact_match"] for h in history]
    assert result["stopped_by"] == "patience" and result["hit_cap"] is None and result["stopped_short"] is None
    assert result["steps"] < 60 * 2 and len(scores) >= 2 and scores[-1] <= max(scores[:-1])  # no better last time
    best = history[scores.index(max(scores))]  # the first validation with the best score: the tested checkpoint
    assert result["best_step"] == best["step"] and result["precision"] == "32-true"
    assert "stopped by patience" in capsys.readouterr().out
    summary = (out / "summary.md").read_text()
    assert "## Training: what stopped each cell" in summary and "| `attention=dot` | patience |" in summary

    capped = {**converge, "trainer.max_epochs": 2, "trainer.callbacks": early_stopping(100)}
    ablate(str(write_grid(tmp_path, {"model.attention": ["general"]}, fixed=capped)), str(tmp_path / "cap"), jobs=1)
    result = json.loads((tmp_path / "cap" / "cells" / "attention=general" / "result.json").read_text())
    assert result["stopped_by"] == "trainer.max_epochs" and result["stopped_short"] is None
    assert result["hit_cap"] == f"reached trainer.max_epochs at update {result['steps']} before dev stopped improving"
    summary = (tmp_path / "cap" / "summary.md").read_text()
    assert "## Cells that hit the cap before dev stopped improving" in summary and "`attention=general`" in summary


@pytest.mark.slow
def test_a_cell_killed_midway_continues_from_its_last_checkpoint_to_the_same_results(tmp_path):
    import os
    import subprocess
    import sys

    import torch

    fixed = {**TINY, "trainer.max_epochs": 4, "model.dropout": 0.2, "last_checkpoint.every_n_steps": 1,
             "data.init_args.val_size": 64, "trainer.deterministic": True,
             "trainer.max_time": "00:01:00:00"}  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "tests"), "OMP_NUM_THREADS": "1"}

    def run(out: Path, grid: Path) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "seq2seq_attn.cli", "ablate", str(grid), "--out", str(out), "--jobs", "1"]
        return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    plain = run(tmp_path / "plain", write_grid(tmp_path / "a", {"seed_everything": [3]}, fixed=fixed))
    assert plain.returncode == 0, plain.stderr[-2000:]
    kill = [{"class_path": "faults.PauseAt", "init_args": {"step": 4, "seconds": 2.0}},  # a slow first attempt
            {"class_path": "faults.KillAt", "init_args": {"step": 5}}]  # 2 steps an epoch: inside epoch 2  # fmt: skip
    grid = write_grid(tmp_path / "b", {"seed_everything": [3]}, fixed={**fixed, "trainer.callbacks": kill})
    first = run(tmp_path / "killed", grid)
    cell = tmp_path / "killed" / "cells" / "seed_everything=3"
    assert "FAILED: the process ended without a result" in first.stdout and not (cell / "result.json").exists()
    killed_at = torch.load(cell / "checkpoints" / "last.ckpt", weights_only=True)
    assert killed_at["global_step"] == 5
    second = run(tmp_path / "killed", grid)
    assert second.returncode == 0 and "1 to run" in second.stdout, second.stderr[-2000:]
    resumed = json.loads((cell / "result.json").read_text())
    uninterrupted = json.loads((tmp_path / "plain" / "cells" / "seed_everything=3" / "result.json").read_text())
    assert resumed["steps"] == uninterrupted["steps"] == 8
    assert resumed["overall"] == uninterrupted["overall"] and resumed["buckets"] == uninterrupted["buckets"]
    # both attempts count, not only the resumed one: the time cap's clock ran 2 s in the first attempt alone
    paused = next(v["time_elapsed"]["train"] for k, v in killed_at["callbacks"].items() if k.startswith("Timer"))
    assert resumed["train_seconds"] >= round(paused, 1) and paused >= 2.0
    # the learning curve's clock runs on through the resume: from the seconds the checkpoint carries
    seconds = [json.loads(line)["seconds"] for line in (cell / "val_history.jsonl").read_text().splitlines()]
    assert len(seconds) == 4 and seconds[1] < killed_at["fit_seconds"] < seconds[2] < seconds[3]

    # killed while testing: the rerun tests the same best checkpoint and reports the same training
    stopping = [{"class_path": "faults.KillAtTest"}, *early_stopping(1)]
    grid = write_grid(tmp_path / "c", {"seed_everything": [3]}, fixed={**fixed, "trainer.callbacks": stopping})
    first = run(tmp_path / "at_test", grid)
    cell = tmp_path / "at_test" / "cells" / "seed_everything=3"
    assert "FAILED" in first.stdout and (cell / "fit.json").is_file() and not (cell / "result.json").exists()
    trained = json.loads((cell / "fit.json").read_text())
    assert trained.pop("budget") == {"max_steps": -1, "max_epochs": 4, "max_time": 3600.0}  # the caps it ran under
    second = run(tmp_path / "at_test", grid)
    assert second.returncode == 0, second.stderr[-2000:]
    retested = json.loads((cell / "result.json").read_text())
    assert {k: retested[k] for k in trained} == trained and retested["stopped_by"] in ("patience", "trainer.max_epochs")
    assert retested["checkpoint"].endswith("best.ckpt") and retested["best_step"] <= retested["steps"]


def test_runs_root_and_publish_keep_checkpoints_out_of_the_published_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("S2S_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {"model.attention": ["dot", "general"]})
    out = ablate(str(grid), jobs=1, publish=str(tmp_path / "docs"))
    assert out == tmp_path / "runs" / "ablations" / "tiny"
    for name in ("attention=dot", "attention=general"):
        published = {p.name for p in (tmp_path / "docs" / "cells" / name).iterdir()}
        assert {"cell.json", "result.json", "test_results.json", "val_history.jsonl", "environment.json"} <= published
        assert not any(p.suffix == ".ckpt" for p in (tmp_path / "docs").rglob("*"))
        assert (out / "cells" / name / "checkpoints" / "best.ckpt").is_file()
    assert (tmp_path / "docs" / "summary.md").read_text() == (out / "summary.md").read_text()
    # a new run folder (a fresh machine) goes on from the published cells: none is trained again
    summary = (tmp_path / "docs" / "summary.md").read_text()
    capsys.readouterr()
    again = ablate(str(grid), str(tmp_path / "fresh"), jobs=1, publish=str(tmp_path / "docs"))
    assert f"2 cells, 0 finished earlier, 2 finished in {tmp_path / 'docs'}, 0 failed earlier, 0 to run" in (
        capsys.readouterr().out
    )
    assert not (again / "cells").exists() and (tmp_path / "docs" / "summary.md").read_text() == summary
    with pytest.raises(ConfigError, match="is the run folder itself"):
        ablate(str(grid), str(out), jobs=1, publish=str(out))


def test_the_published_folder_has_the_grid_before_its_first_cell_finishes(tmp_path, monkeypatch):
    from seq2seq_attn.ablation import runner

    grid = write_grid(tmp_path, {"model.attention": ["dot"]})
    seen = {}

    def run_cells(out, grid, todo, jobs, publish, threads):  # what a report of the published folder finds meanwhile
        seen["grid"] = (publish / "grid.yaml").read_text()

    monkeypatch.setattr(runner, "run_cells", run_cells)
    ablate(str(grid), str(tmp_path / "out"), jobs=1, publish=str(tmp_path / "docs"))
    assert seen["grid"] == grid.read_text()


def test_set_adds_a_setting_to_every_cell_without_renaming_them(tmp_path, capsys):
    grid = write_grid(tmp_path, {"model.attention": ["dot"]})
    main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--set", "model.lr=0.01", "--set",
          "trainer.max_epochs=2"])  # fmt: skip
    cell = tmp_path / "out" / "cells" / "attention=dot"
    config = yaml.safe_load((cell / "config.yaml").read_text())
    assert config["model"]["lr"] == 0.01 and json.loads((cell / "result.json").read_text())["steps"] == 4  # 2 an epoch
    with pytest.raises(SystemExit) as stop:
        main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--set", "trainer.max_steps"])
    assert stop.value.code == 2 and "--set takes KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a grid axis: the cells' own values would override it
        main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--set", "model.attention=general"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--set model.attention: that key is an axis of the grid" in err
    assert len(err.strip().splitlines()) == 1


def test_threads_sets_each_cells_threads_and_the_cell_records_them(tmp_path, capsys):
    grid = write_grid(tmp_path, {"model.attention": ["dot"]})
    main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--jobs", "1", "--threads", "1"])
    environment = json.loads((tmp_path / "out" / "cells" / "attention=dot" / "environment.json").read_text())
    assert environment["cpu"]["threads"] == 1
    with pytest.raises(SystemExit) as stop:
        main(["ablate", str(grid), "--out", str(tmp_path / "out"), "--threads", "-1"])
    assert stop.value.code == 2 and "--threads must be >= 0" in capsys.readouterr().err


def test_gpu_grid_script_runs_only_missing_cells_and_packs_them(tmp_path):
    """scripts/gpu_grid.sh on the CPU: the first run packs its cell; given that cell as published, the
    second run of a larger grid trains only the new cell and packs both."""
    import subprocess
    import sys
    import tarfile

    env = {**os.environ, "PY": sys.executable, "GPU_GRID_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
           "BUDGET_SECONDS": "300", "S2S_RUNS_ROOT": str(tmp_path / "runs1")}  # fmt: skip
    first = write_grid(tmp_path, {"model.attention": ["dot"]})
    script = ["bash", str(ROOT / "scripts" / "gpu_grid.sh")]
    done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**env, "GRID": str(first), "ARCHIVE": str(tmp_path / "one.tar.gz")})  # fmt: skip
    assert "packed 1 finished cell(s)" in done.stdout
    published = tmp_path / "published"
    with tarfile.open(tmp_path / "one.tar.gz") as archive:
        archive.extractall(published, filter="data")
    assert (published / "cells" / "attention=dot" / "result.json").is_file()
    second = write_grid(tmp_path, {"model.attention": ["dot", "general"]})
    env.update(GRID=str(second), PUBLISHED=str(published), ARCHIVE=str(tmp_path / "two.tar.gz"))
    del env["S2S_RUNS_ROOT"]  # the script's own temporary run folder, where ablate finds the published cell
    done = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert "2 cells, 1 finished earlier, 0 failed earlier, 1 to run" in done.stdout
    with tarfile.open(tmp_path / "two.tar.gz") as archive:
        names = archive.getnames()
    assert "cells/attention=general/result.json" in names and "summary.md" in names


def test_training_seconds_count_every_attempt_also_without_a_time_cap():
    import time
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import Timer

    from seq2seq_attn.ablation.cell import training_seconds
    from seq2seq_attn.lit_module import Seq2SeqLitModule

    module = Seq2SeqLitModule()
    module.on_load_checkpoint({"fit_seconds": 500.0})  # a killed attempt trained for 500 s
    module._fit_started = time.monotonic() - 20.0  # this attempt: 20 s so far
    no_cap = SimpleNamespace(callbacks=[], lightning_module=module)
    assert 520.0 <= training_seconds(no_cap, fit_seconds=20.0) < 530.0  # not this attempt's 20 s alone
    timer = Timer(duration="00:01:00:00")
    timer._start_time["train"], timer._end_time["train"] = 0.0, 700.0  # the cap's clock, carried the same way
    assert training_seconds(SimpleNamespace(callbacks=[timer], lightning_module=module), fit_seconds=20.0) == 700.0
    assert training_seconds(SimpleNamespace(callbacks=[], lightning_module=None), fit_seconds=20.0) == 20.0
