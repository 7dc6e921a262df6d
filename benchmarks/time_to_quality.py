"""Time to quality: wall-clock minutes until dev BLEU first reaches a target, beside the final test BLEU.

    python benchmarks/time_to_quality.py --reference CELL [CELL ...] --cells CELL [CELL ...] [--less 0.5]

The measure that users of training systems compare (MLPerf's training benchmarks): how long a recipe takes
to get a model to a given quality, at an equal final score. Each CELL is a finished cell folder of
``seq2seq-attn ablate`` (or of ``benchmarks/peers/bible_onmt.py``): its ``val_history.jsonl`` holds one line
per validation with the update, the training clock (``seconds``: training and validation of one process,
over every attempt of a resumed fit) and dev BLEU; its ``result.json`` the test BLEU, what stopped it and
its precision.

The target is the best dev BLEU that the ``--reference`` cells (today's converge protocol, one per seed)
reach, averaged over them, less ``--less`` BLEU. For every cell the table gives the first validation at or
above the target: its update and its minutes. Minutes compare only between cells that ran on the same
machine with nothing else on its cores, in one invocation; the table names each cell's CPU and precision
so that a mixed table cannot pass unnoticed.
"""

import argparse
import json
import statistics
from pathlib import Path
from typing import Optional

from seq2seq_attn.ablation.report import cpu_of


def history(cell: Path) -> list[dict]:
    """The cell's validations in order: step, seconds, dev BLEU."""
    lines = (cell / "val_history.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [
        {"step": r["step"], "seconds": r.get("seconds"), "bleu": r["overall"]["bleu"]}
        for r in rows
        if "bleu" in r.get("overall", {})
    ]


def best_dev_bleu(cell: Path) -> float:
    scores = [r["bleu"] for r in history(cell)]
    if not scores:
        raise SystemExit(f"{cell}: no dev BLEU in val_history.jsonl: pass cells of a text corpus")
    return max(scores)


def target(reference: list[Path], less: float) -> float:
    """The mean over the reference cells of their best dev BLEU, less ``less``."""
    return statistics.mean(best_dev_bleu(cell) for cell in reference) - less


def first_reach(cell: Path, goal: float) -> Optional[dict]:
    """The first validation whose dev BLEU is at or above ``goal``; None if none is."""
    return next((r for r in history(cell) if r["bleu"] >= goal), None)


def row(cell: Path, goal: float) -> dict:
    result = json.loads((cell / "result.json").read_text(encoding="utf-8")) if (cell / "result.json").is_file() else {}
    test = json.loads((cell / "test_results.json").read_text(encoding="utf-8"))["overall"]
    reached = first_reach(cell, goal)
    seconds = reached["seconds"] if reached else None
    return {
        "cell": cell.name,
        "precision": result.get("precision", "?"),
        "cpu": cpu_of(cell / "environment.json"),
        "updates to target": reached["step"] if reached else None,
        "minutes to target": None if seconds is None else seconds / 60,
        "best dev BLEU": best_dev_bleu(cell),
        "test BLEU": test.get("bleu"),
        "stopped by": result.get("stopped_by", "?"),
    }


def table(rows: list[dict], goal: float) -> str:
    head = ["cell", "precision", "CPU", "updates to target", "minutes to target", "best dev BLEU", "test BLEU"]
    lines = [f"target: dev BLEU {goal:.2f}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        minutes = "not reached" if r["minutes to target"] is None else f"{r['minutes to target']:.1f}"
        updates = "-" if r["updates to target"] is None else f"{r['updates to target']:,}"
        test = "-" if r["test BLEU"] is None else f"{r['test BLEU']:.1f}"
        cells = [f"`{r['cell']}`", r["precision"], r["cpu"], updates, minutes, f"{r['best dev BLEU']:.2f}", test]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", nargs="+", type=Path, required=True, help="today's protocol: one cell per seed")
    parser.add_argument("--cells", nargs="+", type=Path, required=True, help="the cells to time (references too)")
    parser.add_argument("--less", type=float, default=0.5, help="the target lies this far below the best dev BLEU")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    for cell in [*args.reference, *args.cells]:
        if not (cell / "val_history.jsonl").is_file():
            raise SystemExit(f"{cell}: no val_history.jsonl: pass finished cell folders (…/cells/<cell>)")
    goal = target(args.reference, args.less)
    rows = [row(cell, goal) for cell in args.cells]
    print(table(rows, goal))
    if args.json:
        args.json.write_text(json.dumps({"target": goal, "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
