"""Run every cell of a grid in its own process, resumably, then report.

Killing the runner (even with SIGKILL) ends its cells too; running the same
command again runs only what is missing, and a cell that was cut short
continues from its last checkpoint. ``results.csv`` is rebuilt from the cells'
``result.json`` files and written atomically, so it is never truncated or
duplicated.

Layout of the output folder::

    DIR/grid.yaml                 the grid that was run (copied)
    DIR/cells/<cell>/cell.json    the cell's overrides
    DIR/cells/<cell>/result.json  written last by a finished cell (never run again, nor when it is in --publish)
    DIR/cells/<cell>/error.json   a failed cell's one-line error (+ traceback)
    DIR/cells/<cell>/log.txt      the cell's output (appended to when a killed cell resumes)
    DIR/cells/<cell>/checkpoints/ best.ckpt, last.ckpt: a killed cell continues from last.ckpt
    DIR/results.csv, summary.md, degradation.png, attention.png
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from seq2seq_attn.ablation.cell import ERROR, RESULT
from seq2seq_attn.ablation.grid import Cell, Grid
from seq2seq_attn.ablation.report import write_report, write_results_csv
from seq2seq_attn.errors import ConfigError, find_config_error
from seq2seq_attn.results import LENGTH_PENALTY, TRANSLATIONS, VAL_HISTORY, write_json

# the small files of a finished cell that rebuild its rows, statistics and plots without its checkpoints
PUBLISHED = ("cell.json", RESULT, "test_results.json", TRANSLATIONS, VAL_HISTORY,
             "environment.json", "precision.json", "test_attention.json", LENGTH_PENALTY)  # fmt: skip


def default_out(grid: Grid) -> Path:
    """``$S2S_RUNS_ROOT/ablations/<grid name>``; without the variable, ``runs/`` under the current folder."""
    return Path(os.environ.get("S2S_RUNS_ROOT", "runs")) / "ablations" / grid.name


def publish_cell(out: Path, cell: Cell, publish: Path) -> None:
    """Copy a finished cell's small files (:data:`PUBLISHED`) from the run folder ``out`` to ``publish``."""
    source, target = cell_dir(out, cell), cell_dir(publish, cell)
    target.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def cell_dir(out: Path, cell: Cell) -> Path:
    return out / "cells" / cell.name


def status(out: Path, cell: Cell) -> str:
    folder = cell_dir(out, cell)
    if (folder / RESULT).is_file():
        return "done"
    return "failed" if (folder / ERROR).is_file() else "missing"


def _die_with_runner() -> None:
    """In a cell process: end when the runner ends, even by SIGKILL (Linux), so no orphan races a rerun."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def _exclusive(out: Path):
    """One runner per output folder: a second one would run the same cells into the same folders."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".runner.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another `seq2seq-attn ablate` is running on {out}: wait for it to finish or pass another --out"
            ) from None
        yield


def invalid_cells(grid: Grid, cells: list[Cell]) -> dict[Cell, str]:
    """The cells whose configuration ``fit`` would reject, each with its one-line reason."""
    from seq2seq_attn.lightning_cli import check_config

    invalid = {}
    for cell in cells:
        try:
            check_config(cell_args(grid, cell))
        except Exception as err:  # noqa: BLE001 - any failure to build the cell is what the dry run reports
            cause = find_config_error(err) or err
            invalid[cell] = (str(cause) if isinstance(cause, ConfigError) else f"{type(cause).__name__}: {cause}"
                             ).splitlines()[0]  # fmt: skip
    return invalid


def cell_args(grid: Grid, cell: Cell) -> list[str]:
    """The LightningCLI arguments of a cell; with W&B on, its run is named after the cell, grouped by grid."""
    configs = [a for c in grid.configs for a in ("--config", str(c))]
    return [*configs, *grid.fixed_args(), *cell.cli_args(), "--wandb.group", grid.name, "--wandb.name", cell.name]


def _launch(out: Path, cell: Cell, grid: Grid, threads: int) -> subprocess.Popen:
    folder = cell_dir(out, cell)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "cell.json", {"name": cell.name, "overrides": cell.as_dict()})
    args = cell_args(grid, cell)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    log = open(folder / "log.txt", "a")  # a resumed cell keeps the log of its earlier attempt
    command = [sys.executable, "-m", "seq2seq_attn.ablation.cell", str(folder), "--", *args]
    linux = sys.platform.startswith("linux")
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_runner if linux else None
    )


def _describe(out: Path, cell: Cell, metric: str) -> str:
    folder = cell_dir(out, cell)
    if (folder / RESULT).is_file():
        result = json.loads((folder / RESULT).read_text())
        value = result["overall"].get(metric)
        shown = f"{metric} {value:.3f}" if value is not None else "done"
        warning = result.get("stopped_short") or result.get("hit_cap")
        short = f"; WARNING: {warning}" if warning else ""
        stop = f", stopped by {result['stopped_by']} at update {result['steps']}" if result.get("stopped_by") else ""
        return f"{shown} (fit {result['fit_seconds']:.0f} s{stop}{short})"
    if (folder / ERROR).is_file():
        return "FAILED: " + json.loads((folder / ERROR).read_text())["error"]
    return "FAILED: the process ended without a result (see log.txt)"


def run_cells(
    out: Path, grid: Grid, todo: list[Cell], jobs: int, publish: Optional[Path] = None, threads: Optional[int] = None
) -> None:
    """At most ``jobs`` cells at a time, each with ``threads`` OpenMP threads (default: the cores shared among
    the ``jobs``); results.csv is refreshed after each one (and the cell's small files copied to ``publish``,
    with its results.csv, as it finishes)."""
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    pending, running, finished = list(todo), {}, 0
    try:
        while pending or running:
            while pending and len(running) < jobs:
                cell = pending.pop(0)
                running[cell] = _launch(out, cell, grid, threads)
            time.sleep(0.2)
            for cell, process in list(running.items()):
                if process.poll() is None:
                    continue
                del running[cell]
                finished += 1
                print(f"[{finished}/{len(todo)}] {cell.name}: {_describe(out, cell, grid.metric)}", flush=True)
                write_results_csv(out)
                if publish is not None and status(out, cell) == "done":
                    publish_cell(out, cell, publish)
                    write_results_csv(publish)
    except KeyboardInterrupt:
        for process in running.values():
            process.terminate()
        for process in running.values():
            process.wait()
        write_results_csv(out)
        print("interrupted: finished cells are kept; run the same command again to finish the rest", flush=True)
        raise


def ablate(
    grid_path: str,
    out: Optional[str] = None,
    jobs: int = 0,
    retry_failed: bool = False,
    dry_run: bool = False,
    publish: Optional[str] = None,
    settings: Optional[dict] = None,
    threads: Optional[int] = None,
) -> Path:
    """Run what is missing of the grid, then write the results table, summary and plots.

    ``publish``: a second folder (in a repository, say) that receives each finished cell's small files as it
    lands, and the report at the end, while checkpoints and logs stay in ``out``; a cell already finished
    there is not run again, so a grid goes on from its committed cells in a new run folder. ``settings``: overrides
    for every cell on top of the grid's ``fixed`` (``{"trainer.accelerator": "gpu"}`` runs the same cells on a
    GPU); like ``fixed`` they are not part of the cells' names, and each cell's config.yaml records them.
    ``threads``: OpenMP threads per cell; by default the cores are shared among the cells that run at once,
    so a lone last cell gets them all (pass it when another job shares the machine)."""
    grid = Grid.load(grid_path)
    axes = sorted(set(settings or {}) & set(grid.grid))
    if axes:  # the cell's own value would silently win over it
        raise ConfigError(f"--set {axes[0]}: that key is an axis of the grid {grid.path} (values "
                          f"{grid.grid[axes[0]]}); edit the grid's values instead, or copy the grid")  # fmt: skip
    grid.fixed.update(settings or {})
    out_dir = Path(out) if out else default_out(grid)
    publish_dir = Path(publish) if publish else None
    if publish_dir is not None and publish_dir.resolve() == out_dir.resolve():
        raise ConfigError(f"--publish {publish} is the run folder itself: pass another folder, or leave it out")
    cells, skipped = grid.cells()
    reasons: dict[str, list[str]] = {}
    for cell, reason in skipped:
        reasons.setdefault(reason, []).append(cell.name)
    for reason, names in reasons.items():
        print(f"skipping {len(names)} combination(s), e.g. {names[0]}: {reason}")
    states = {cell: status(out_dir, cell) for cell in cells}
    for cell in cells:  # a fresh machine goes on from the committed cells: those published are not run again
        if states[cell] != "done" and publish_dir is not None and status(publish_dir, cell) == "done":
            states[cell] = "published"
    todo = [c for c in cells if states[c] == "missing" or (retry_failed and states[c] == "failed")]
    counts = {s: list(states.values()).count(s) for s in ("done", "published", "failed")}
    published = f", {counts['published']} finished in {publish_dir}" if counts["published"] else ""
    print(
        f"{grid.name}: {len(cells)} cells, {counts['done']} finished earlier{published}, "
        f"{counts['failed']} failed earlier"
        f"{' (rerun with --retry-failed)' if counts['failed'] and not retry_failed else ''}, {len(todo)} to run"
    )
    if dry_run:
        invalid = invalid_cells(grid, todo)
        for cell in todo:
            print(f"  INVALID {cell.name}: {invalid[cell]}" if cell in invalid else f"  would run {cell.name}")
        if invalid:
            raise ConfigError(f"{len(invalid)} of the {len(todo)} cells to run have invalid configurations "
                              f"(listed above): fix {grid.path}")  # fmt: skip
        return out_dir
    with _exclusive(out_dir):
        shutil.copyfile(grid.path, out_dir / "grid.yaml")
        if publish_dir is not None:  # the published report splits its figures as the grid says from the first cell
            publish_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(grid.path, publish_dir / "grid.yaml")
        jobs = jobs or min(os.cpu_count() or 1, 8)
        start = time.time()
        run_cells(out_dir, grid, todo, max(1, min(jobs, len(todo) or 1)), publish_dir, threads)
        if todo:
            print(f"ran {len(todo)} cell(s) in {time.time() - start:.0f} s")
        write_results_csv(out_dir)
        write_report(out_dir, grid.metric)
        if publish_dir is not None:
            for cell in cells:
                if status(out_dir, cell) == "done":
                    publish_cell(out_dir, cell, publish_dir)
            write_results_csv(publish_dir)
            write_report(publish_dir, grid.metric)
    return out_dir
