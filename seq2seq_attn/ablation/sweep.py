"""The same grid as a W&B sweep, so ``wandb agent`` can spread its cells over many machines.

    seq2seq-attn ablate GRID.yaml --emit-sweep sweep.yaml [--out DIR]
    wandb sweep sweep.yaml              # prints the sweep id
    wandb agent ENTITY/PROJECT/SWEEP_ID # on every machine, as often as you like

Each agent runs ``seq2seq-attn cell GRID.yaml --out DIR --key=value ...``: the very
fit + test of the runner's cells, written to ``DIR/cells/<cell>/`` and logged as a W&B
run named after the cell in the grid's group. ``seq2seq-attn report DIR`` then draws the
comparison from the cells that landed on this machine (or on a shared disk).
"""

from pathlib import Path
from typing import Any, Optional

import yaml

from seq2seq_attn.ablation.grid import Cell, Grid
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.metrics import METRICS
from seq2seq_attn.results import write_atomic


def sweep_config(grid: Grid, out: Path) -> dict[str, Any]:
    """A W&B ``grid`` sweep over the grid's keys whose command runs one cell."""
    metric = grid.metric
    goal = "minimize" if metric in METRICS and METRICS[metric].lower_is_better else "maximize"
    return {
        "name": grid.name,
        "description": f"seq2seq-attn grid {grid.path}",
        "method": "grid",
        "metric": {"name": f"test/{metric}", "goal": goal},
        "parameters": {key: {"values": list(values)} for key, values in grid.grid.items()},
        "command": ["${env}", "seq2seq-attn", "cell", str(grid.path), "--out", str(out), "${args}"],
    }


def emit_sweep(grid: Grid, path: str, out: Path) -> Path:
    written = write_atomic(path, yaml.safe_dump(sweep_config(grid, out), sort_keys=False))
    print(
        f"wrote {written}: a W&B grid sweep over {len(grid.grid)} key(s), "
        f"{len(grid.cells()[0])} valid cell(s)\n"
        f"  wandb sweep {written}              # prints SWEEP_ID\n"
        f"  wandb agent ENTITY/PROJECT/SWEEP_ID  # on each machine; cells land in {out}/cells/"
    )
    return written


def cell_from_args(grid: Grid, argv: list[str]) -> tuple[Optional[Cell], str]:
    """The grid cell that ``--key=value`` arguments (as ``wandb agent`` passes them) name.

    Returns (None, reason) for a combination the runner would skip (e.g. a scorer with flow ``none``).
    """
    given: dict[str, Any] = {}
    for arg in argv:
        key, sep, text = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or not sep:
            raise ConfigError(f"cell arguments are --key=value pairs of the grid, got {arg!r}")
        given[key] = yaml.safe_load(text)
    if set(given) != set(grid.grid):
        raise ConfigError(f"cell arguments must set exactly the grid keys {sorted(grid.grid)}, got {sorted(given)}")
    for key, value in given.items():
        if value not in grid.grid[key]:
            raise ConfigError(f"{key}={value!r} is not in the grid's values {grid.grid[key]}")
    wanted = Cell(tuple((key, given[key]) for key in grid.grid))
    cells, skipped = grid.cells()
    for cell in cells:
        if all(wanted.as_dict().get(k) == v for k, v in cell.overrides):
            return cell, ""
    reason = next((why for cell, why in skipped if cell == wanted), "not a cell of the grid")
    return None, reason
