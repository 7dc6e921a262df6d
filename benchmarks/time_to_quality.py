"""Time to quality: wall-clock minutes until dev BLEU first reaches a target, beside the final test BLEU.

    python benchmarks/time_to_quality.py --reference CELL [CELL ...] --cells CELL [CELL ...] [--less 0.5] [--curves]
        [--stopping]

The measure that users of training systems compare (MLPerf's training benchmarks): how long a recipe takes
to get a model to a given quality, at an equal final score. Each CELL is a finished cell folder of
``seq2seq-attn ablate`` (or of ``benchmarks/peers/bible_onmt.py``): its ``val_history.jsonl`` holds one line
per validation with the update, the training clock (``seconds``: training and validation of one process,
over every attempt of a resumed fit) and dev BLEU; its ``result.json`` the test BLEU, what stopped it and
its precision.

The target is the best dev BLEU that the ``--reference`` cells (today's converge protocol, one per seed)
reach, averaged over them, less ``--less`` BLEU. For every cell the table gives the first validation at or
above the target: its update and its minutes, its last validation with the minutes to it (where a finished
cell stopped: the time to a converged model), and the share of the cell's clock spent validating (where its
validations record their seconds). Cells are named by study and cell, so that the same cell of two studies
(today's protocol and a new recipe) tells apart. Minutes compare only between cells that ran on the same
machine with nothing else on its cores, in one invocation; the table names each cell's CPU and precision
so that a mixed table cannot pass unnoticed. ``--curves`` adds each cell's dev BLEU per update, side by side
(cell 1, 2, ... in the order of ``--cells``). ``--stopping`` replays other early-stopping rules on each cell's
validations (Lightning's EarlyStopping on dev BLEU: a validation improves only if it beats the best so far by
more than ``min_delta``; training stops after ``patience`` validations without one): where each rule would have
stopped, its minutes, and the best dev BLEU by then (what ``best.ckpt`` would hold). Training up to that stop is
the cell's own, so the replay is exact for everything but the test BLEU of that earlier checkpoint.
"""

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional

from seq2seq_attn.ablation.cell import RESULT
from seq2seq_attn.ablation.length_study import read_history
from seq2seq_attn.ablation.report import cpu_of
from seq2seq_attn.results import VAL_HISTORY, read_json


def check_cells(cells: list[Path]) -> None:
    """Stop in one line at the first folder that is no cell (no ``val_history.jsonl``)."""
    for cell in cells:
        if not (cell / VAL_HISTORY).is_file():
            raise SystemExit(f"{cell}: no {VAL_HISTORY}: pass finished cell folders (…/cells/<cell>)")


def dev_bleu(cell: Path) -> list[dict]:
    """The cell's validations with a dev BLEU, one per update in order (a resumed cell's repeats merged)."""
    return [r for r in read_history(cell) if "bleu" in r.get("overall", {})]


def best_dev_bleu(history: list[dict], cell: Path) -> float:
    if not history:
        raise SystemExit(f"{cell}: no dev BLEU in {VAL_HISTORY}: pass cells of a text corpus")
    return max(r["overall"]["bleu"] for r in history)


def target(histories: dict[Path, list[dict]], reference: list[Path], less: float) -> float:
    """The mean over the reference cells of their best dev BLEU, less ``less``."""
    return statistics.mean(best_dev_bleu(histories[cell], cell) for cell in reference) - less


def precision_of(cell: Path) -> str:
    """The precision a cell trains in (``precision.json``, written before training: a running cell has it)."""
    chosen = cell / "precision.json"
    return read_json(chosen).get("precision", "?") if chosen.is_file() else "?"


def validation_share(history: list[dict]) -> Optional[float]:
    """The share of the clock spent validating, over the stretch of validations that record their seconds
    (``validation_seconds``; a cell trained before they were recorded gives None)."""
    timed = [i for i, r in enumerate(history) if r.get("validation_seconds") is not None]
    if not timed or timed[-1] - timed[0] + 1 != len(timed):
        return None
    start = history[timed[0] - 1]["seconds"] if timed[0] > 0 else 0.0  # the clock before the first timed one
    span = history[timed[-1]]["seconds"] - start
    return sum(history[i]["validation_seconds"] for i in timed) / span if span > 0 else None


def study_of(cell: Path) -> str:
    """The study a cell belongs to: the folder holding its ``cells/`` folder (a peer's cell folder: its parent)."""
    return cell.parent.parent.name if cell.parent.name == "cells" else cell.parent.name


def row(cell: Path, history: list[dict], goal: float) -> dict:
    """The cell's first validation at or above ``goal`` in its ``history`` (:func:`dev_bleu`; update and minutes,
    None where none is), beside its best dev BLEU, test BLEU, precision and CPU."""
    result = read_json(cell / RESULT) if (cell / RESULT).is_file() else {}
    tested = cell / "test_results.json"
    test = read_json(tested)["overall"] if tested.is_file() else {}  # none yet while the cell trains
    best = best_dev_bleu(history, cell)  # first: a cell without dev BLEU stops here, in one line
    reached: Optional[dict] = next((r for r in history if r["overall"]["bleu"] >= goal), None)
    last = history[-1]  # the clock at the last validation: where a finished cell stopped
    return {
        "cell": f"{study_of(cell)}/{cell.name}",
        "precision": result.get("precision") or precision_of(cell),
        "cpu": cpu_of(cell / "environment.json"),
        "updates to target": reached["step"] if reached else None,
        "minutes to target": reached["seconds"] / 60 if reached else None,
        "best dev BLEU": best,
        "test BLEU": test.get("bleu"),
        "stopped by": result.get("stopped_by", "?"),
        "last update": last["step"],
        "minutes to last": last["seconds"] / 60 if last.get("seconds") is not None else None,
        "validation share": validation_share(history),
    }


def table(rows: list[dict], goal: float) -> str:
    head = ["cell", "precision", "CPU", "updates to target", "minutes to target", "best dev BLEU", "test BLEU",
            "last update (minutes)", "validation share"]  # fmt: skip
    lines = [f"target: dev BLEU {goal:.2f}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        minutes = "not reached" if r["minutes to target"] is None else f"{r['minutes to target']:.1f}"
        updates = "-" if r["updates to target"] is None else f"{r['updates to target']:,}"
        test = "-" if r["test BLEU"] is None else f"{r['test BLEU']:.1f}"
        share = "-" if r["validation share"] is None else f"{r['validation share']:.0%}"
        clock = "" if r["minutes to last"] is None else f" ({r['minutes to last']:.1f})"
        last = f"{r['last update']:,}{clock}"
        best = f"{r['best dev BLEU']:.2f}"
        cells = [f"`{r['cell']}`", r["precision"], r["cpu"], updates, minutes, best, test, last, share]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curves(histories: list[list[dict]], names: list[str]) -> str:
    """Dev BLEU of each cell (its :func:`dev_bleu` history) at every update any of them validated at, side by side
    ("-" where one did not)."""
    by_cell = [{r["step"]: r["overall"]["bleu"] for r in history} for history in histories]
    steps = sorted(set().union(*by_cell))
    lines = ["| update | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for step in steps:
        values = [f"{bleu[step]:.2f}" if step in bleu else "-" for bleu in by_cell]
        lines.append(f"| {step:,} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def stop_of(history: list[dict], patience: int, min_delta: float = 0.0) -> Optional[dict]:
    """The validation at which EarlyStopping(monitor dev BLEU, mode max, ``patience``, ``min_delta``) would have
    stopped the cell (None: not within its validations), with the best dev BLEU up to there and its update (what
    ``best.ckpt``, which knows no ``min_delta``, would hold)."""
    best, waited = None, 0
    for i, record in enumerate(history):
        bleu = record["overall"]["bleu"]
        if best is None or bleu - min_delta > best:
            best, waited = bleu, 0
        else:
            waited += 1
            if waited >= patience:
                kept = max(history[: i + 1], key=lambda r: r["overall"]["bleu"])
                return {"update": record["step"], "seconds": record.get("seconds"),
                        "best dev BLEU": kept["overall"]["bleu"], "best update": kept["step"]}  # fmt: skip
    return None


RULES = [(4, 0.0), (3, 0.0), (2, 0.0), (4, 0.05), (4, 0.1)]  # (patience, min_delta); the first is the protocol's


def stopping(histories: list[list[dict]], names: list[str]) -> str:
    """Per cell and rule (:data:`RULES`), the update (minutes) it would stop at and the best dev BLEU by then."""
    head = [f"patience {p}" + (f", min_delta {d}" if d else "") for p, d in RULES]
    lines = ["| cell | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    for name, history in zip(names, histories):
        values = []
        for patience, delta in RULES:
            stop = stop_of(history, patience, delta)
            if stop is None:
                values.append(f"not by {history[-1]['step']:,}")
                continue
            minutes = "" if stop["seconds"] is None else f" ({stop['seconds'] / 60:.1f})"
            values.append(f"{stop['update']:,}{minutes}: {stop['best dev BLEU']:.2f} at {stop['best update']:,}")
        lines.append(f"| {name} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", nargs="+", type=Path, required=True, help="today's protocol: one cell per seed")
    parser.add_argument("--cells", nargs="+", type=Path, required=True, help="the cells to time (references too)")
    parser.add_argument("--less", type=float, default=0.5, help="the target lies this far below the best dev BLEU")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--curves", action="store_true", help="also print every cell's dev BLEU per update")
    parser.add_argument("--stopping", action="store_true", help="also replay other early-stopping rules per cell")
    args = parser.parse_args()
    check_cells([*args.reference, *args.cells])
    histories = {cell: dev_bleu(cell) for cell in [*args.reference, *args.cells]}  # each read once
    goal = target(histories, args.reference, args.less)
    rows = [row(cell, histories[cell], goal) for cell in args.cells]
    print(table(rows, goal))
    timed, names = [histories[cell] for cell in args.cells], [f"cell {i}" for i in range(1, len(args.cells) + 1)]
    if args.curves:
        print("\ndev BLEU per update\n")
        print(curves(timed, names))
    if args.stopping:
        print("\nearly stopping replayed: stop update (minutes): best dev BLEU at its update\n")
        print(stopping(timed, names))
    if args.json:
        args.json.write_text(json.dumps({"target": goal, "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
