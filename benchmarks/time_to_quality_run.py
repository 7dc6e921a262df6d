"""Time to quality in one invocation: today's protocol, the fast recipe and OpenNMT-py, each trained on this
machine until its dev BLEU first reaches the same target, one after the other; prints minutes and ratios.

    S2S_DATA_ROOT=DIR python benchmarks/time_to_quality_run.py --work RUNS/time_to_quality \
        --reference docs/results/bible_en_es_scorers/cells/CELL [CELL ...] \
        [--model general|additive] [--seed 1] [--onmt ONMT_VENV/bin --onmt-steps 8000]

CELL: today's cells of the model (Luong general: ``flow=luong__attention=general__input_feed=true__score_scale=
sqrt_d__seed_everything=1``; Bahdanau additive: the ``...train_max_words=30...`` cells of bible_en_es_converged).

What the ratios divide must be measured alike, so all of it runs here, in sequence, with nothing else on
the cores (start it on a quiet machine): the cells of ``benchmarks/time_to_quality.py`` come from studies
that ran on other days, other CPUs, some beside other jobs. The target is the mean best dev BLEU of the
``--reference`` cells (today's converge protocol, one per seed) less ``--less`` (or ``--target`` itself).

1. ``onmt`` (Luong general only, with ``--onmt``): ``benchmarks/peers/bible_onmt.py`` on the same capped
   pairs and pieces for ``--onmt-steps`` updates, a checkpoint every 400 decoded on dev afterwards; its clock
   at a checkpoint is OpenNMT-py's training clock plus the dev decodes so far, as ours includes validation.
   It goes first because it cannot resume: a session cut short loses the least.
2. ``converge``: one cell of ``experiments/bible_en_es/converge.yaml`` (cap 30) through ``seq2seq-attn
   ablate``, ended as soon as a validation reaches the target (the runner's cells die with it).
3. ``fast``: the same cell with ``experiments/bible_en_es/fast.yaml`` on top, ended the same way.

Each part's clock is what its ``val_history.jsonl`` records at the first validation at or above the target
(training and validation, over every attempt of a resumed cell). Running the command again skips a part
that has reached the target (or finished) and resumes one that was cut short from its last checkpoint, so
the clock of a resumed part includes its restart. The table is ``benchmarks/time_to_quality.py``'s, then the
ratios of the minutes to the target.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from seq2seq_attn.ablation.grid import Grid
from seq2seq_attn.ablation.runner import cell_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_to_quality import check_cells, dev_bleu, row, table, target  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "experiments" / "ablations" / "bible_fast_recipe.yaml"  # its stack ends in fast.yaml
MODELS = {"general": ("luong", "general"), "additive": ("bahdanau", "additive")}  # the (flow, scorer) it times
RECIPES = ("converge", "fast")  # converge: the grid's stack without fast.yaml; fast: the grid's stack


def write_grid(work: Path, recipe: str, model: str, seed: int) -> Path:
    """A one-cell grid file for ``seq2seq-attn ablate``: the fast recipe grid's cell of the model (its configs,
    fixed settings and overrides), with ``seed``; without ``fast.yaml`` for ``converge``."""
    grid = Grid.load(GRID)
    configs = grid.configs if recipe == "fast" else [c for c in grid.configs if c.name != "fast.yaml"]
    flow, attention = MODELS[model]
    cells = [c.as_dict() for c in grid.cells()[0]]
    cell = next(c for c in cells if (c.get("model.flow"), c.get("model.attention")) == (flow, attention))
    spec = {"name": f"time_to_quality_{recipe}", "configs": [str(c) for c in configs], "metric": grid.metric,
            "fixed": grid.fixed, "grid": [{key: [seed if key == "seed_everything" else value]
                                           for key, value in cell.items()}]}  # fmt: skip
    path = work / f"{recipe}_{model}_s{seed}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def reached(cell: Path, goal: float) -> bool:
    """Whether a validation of the cell has reached ``goal`` (False while its last line is half written)."""
    try:
        return any(r["overall"]["bleu"] >= goal for r in dev_bleu(cell))
    except json.JSONDecodeError:
        return False


def ablate_command(grid_file: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "seq2seq_attn.cli", "ablate", str(grid_file), "--out", str(out), "--jobs", "1"]


def train_to(grid_file: Path, out: Path, goal: float, poll: float = 5.0) -> Path:
    """Run the grid's one cell until a validation reaches ``goal`` (or the cell ends); return its folder."""
    grid = Grid.load(grid_file)
    cell = cell_dir(out, grid.cells()[0][0])
    if reached(cell, goal) or (cell / "result.json").is_file():
        print(f"{cell}: done earlier", flush=True)
        return cell
    with open(out.parent / f"{out.name}.log", "a") as log:
        command = ablate_command(grid_file, out)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while process.poll() is None:
            time.sleep(poll)
            if reached(cell, goal):
                os.killpg(process.pid, signal.SIGTERM)  # the runner's cell dies with it (PR_SET_PDEATHSIG)
                process.wait()
                break
    print(f"{cell}: {'reached' if reached(cell, goal) else 'ended below'} dev BLEU {goal:.2f}", flush=True)
    return cell


def run_onmt(work: Path, onmt: Path, steps: int, seed: int) -> Path:
    out = work / "onmt" / f"seed{seed}"
    if (out / "result.json").is_file():
        print(f"{out}: done earlier", flush=True)
        return out
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(ROOT / "benchmarks/peers/bible_onmt.py"), "--work", str(work / "onmt_work"),
               "--onmt", str(onmt), "--steps", str(steps), "--every", "400", "--seed", str(seed),
               "--train-max-words", "30", "--out", str(out)]  # fmt: skip
    code = subprocess.run(command).returncode
    if code:
        raise SystemExit(f"OpenNMT-py's run failed (exit {code}): see {work / 'onmt_work' / 'run' / 'stdout.log'}")
    return out


def ratio(numerator: dict, denominator: dict) -> str:
    """Minutes to the target of one row over another's; a bound where the second ended below the target."""
    mine, theirs = numerator["minutes to target"], denominator["minutes to target"]
    if mine is None:
        return "-"
    if theirs is None:  # it never got there: it took longer than all of its clock
        end = denominator["minutes to last"]
        return "-" if end is None else f"< {mine / end:.2f}× (it ended below the target after {end:.1f} minutes)"
    return f"{mine / theirs:.2f}×"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="run folders (outside the repository)")
    goal = parser.add_mutually_exclusive_group(required=True)
    goal.add_argument("--reference", nargs="+", type=Path, help="today's protocol: one finished cell per seed")
    goal.add_argument("--target", type=float, help="the dev BLEU target itself")
    parser.add_argument("--less", type=float, default=0.5, help="the target lies this far below the best dev BLEU")
    parser.add_argument("--model", choices=sorted(MODELS), default="general")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--onmt", type=Path, help="the bin folder of a venv with OpenNMT-py 3.5.1 (general only)")
    parser.add_argument("--onmt-steps", type=int, default=8000)
    args = parser.parse_args()
    if args.onmt and args.model != "general":
        raise SystemExit("--onmt trains OpenNMT-py's Luong general model: pass --model general, or leave out --onmt")
    check_cells(args.reference or [])
    goal_bleu = (
        args.target
        if args.target is not None
        else target({c: dev_bleu(c) for c in args.reference}, args.reference, args.less)
    )
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"target: dev BLEU {goal_bleu:.2f}; {args.model}, seed {args.seed}; runs in {work}", flush=True)
    cells = {"onmt": run_onmt(work, args.onmt.resolve(), args.onmt_steps, args.seed)} if args.onmt else {}
    for recipe in RECIPES:
        cells[recipe] = train_to(write_grid(work, recipe, args.model, args.seed), work / recipe, goal_bleu)
    rows = {name: row(cell, dev_bleu(cell), goal_bleu) for name, cell in cells.items()}
    print()
    print(table(list(rows.values()), goal_bleu))
    print()
    print(f"fast / converge: {ratio(rows['fast'], rows['converge'])} minutes to the target")
    if "onmt" in rows:
        print(f"fast / OpenNMT-py: {ratio(rows['fast'], rows['onmt'])}; "
              f"converge / OpenNMT-py: {ratio(rows['converge'], rows['onmt'])}")  # fmt: skip


if __name__ == "__main__":
    main()
