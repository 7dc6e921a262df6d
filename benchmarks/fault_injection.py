"""Kill a converge-protocol cell at many points of its life; every rerun must end as the uninterrupted cell.

    python benchmarks/fault_injection.py [--points N,...] [--keep DIR] [--average DECAY] [--jobs N]

The cell is a real ``seq2seq_attn.ablation.cell`` process on the repository's Bible fixture corpus
(tests/data/corpora) with the converge protocol in small: a tiny Luong-attention GRU with dropout, a
validation every 4 updates (dev decoded greedily), ``last.ckpt`` every 2 updates (so checkpoints fall
between validations and at them), early stopping on dev loss (patience 2, a gain of 0.3 nats needed: it
stops the cell after 24 updates), ``best.ckpt`` the best dev loss, a beam-2 test and the length-penalty
search after it. It runs once without interruption, then once per kill point: SIGKILL at that point
(``tests/faults.py``), then the same command again until it finishes. Each finished cell is compared with
the uninterrupted one: what stopped it and at which update, the update of ``best.ckpt``, every validation in
``val_history.jsonl`` (no gap, no duplicate, the same metrics), the weights of ``best.ckpt``, the test
metrics overall and per bucket, the tuned length penalty and the test translations. Prints one row per
kill point and exits 1 if any differs. ``--average DECAY`` trains every cell with an exponential moving
average of its weights (:class:`seq2seq_attn.averaging.ExponentialAverage`), which checkpoints carry too.
The cells are independent processes of one thread each: ``--jobs`` of them run side by side (default: one
per core).
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
VALIDATE_EVERY, SAVE_EVERY = 4, 2


class KillPoint(NamedTuple):
    name: str
    callbacks: list  # the fault callbacks (tests/faults.py) of the first attempt
    attempts: int  # attempts a cell killed there takes to finish


def kill(point: str, step: int = 0) -> dict:
    return {"class_path": "faults.KillPoint", "init_args": {"point": point, "step": step}}


# validations at updates 4, 8, 12, ...; last.ckpt at 2, 4, 6, ... (at 4 and 8 after the validation)
KILL_POINTS = [
    KillPoint("mid-update", [kill("update", 4)], 2),
    KillPoint("right after a checkpoint between validations", [kill("batch", 6)], 2),
    KillPoint("after a validation and its checkpoint", [kill("batch", 8)], 2),
    KillPoint("after a validation, before the next checkpoint", [kill("update", 8)], 2),
    KillPoint("mid-validation", [kill("validation", 8)], 2),
    KillPoint("mid-checkpoint-write", [{"class_path": "faults.KillDuringSave", "init_args": {"step": 5}}], 2),
    KillPoint("after fit, before the result files", [kill("fit_end")], 2),
    KillPoint("mid-test-decode", [kill("test")], 2),
    KillPoint("after the test, before result.json", [kill("test_end")], 2),
    KillPoint("during the resume itself", [kill("update", 6), kill("resume")], 3),
]


def average(decay: float) -> dict:
    return {"class_path": "seq2seq_attn.averaging.ExponentialAverage", "init_args": {"decay": decay}}


def cell_args(faults: list) -> list[str]:
    stopping = {"class_path": "pytorch_lightning.callbacks.EarlyStopping",
                "init_args": {"monitor": "val/loss", "mode": "min", "patience": 2, "min_delta": 0.3}}  # fmt: skip
    return [
        "--config", str(EXPERIMENTS / "base.yaml"), "--config", str(EXPERIMENTS / "bible_en_es" / "base.yaml"),
        "--config", str(EXPERIMENTS / "bible_en_es" / "converge.yaml"),
        "--trainer.precision", "32-true", "--trainer.deterministic", "true", "--trainer.max_steps", "200",
        "--trainer.val_check_interval", str(VALIDATE_EVERY), "--last_checkpoint.every_n_steps", str(SAVE_EVERY),
        "--trainer.callbacks", json.dumps([*faults, stopping]),
        "--best_checkpoint.monitor", "val/loss", "--best_checkpoint.mode", "min",
        "--data.init_args.vocab_size", "300", "--data.init_args.batch_size", "32",
        "--model.flow", "luong", "--model.attention", "general", "--model.emb_size", "16", "--model.hidden_size", "16",
        "--model.dec_hidden_size", "16", "--model.dropout", "0.2", "--model.lr", "0.01", "--model.beam_size", "2",
        "--model.max_len_b", "4", "--length_penalty_search.alphas", "[0.6, 1.0]", "--seed_everything", "3",
        "--wandb.enabled", "false",
    ]  # fmt: skip


def run_cell(folder: Path, faults: list, max_attempts: int = 6) -> int:
    """Run the cell in ``folder`` until it finishes; the number of attempts it took."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
           "S2S_DATA_ROOT": str(ROOT / "tests" / "data" / "corpora"), "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "disabled"}  # fmt: skip
    command = [sys.executable, "-m", "seq2seq_attn.ablation.cell", str(folder), "--", *cell_args(faults)]
    for attempt in range(1, max_attempts + 1):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if (folder / "result.json").is_file():
            return attempt
        if done.returncode >= 0 and done.returncode != 1:  # not killed, not a recorded failure: stop here
            raise RuntimeError(f"cell in {folder} ended with {done.returncode}: {done.stderr[-1500:]}")
    raise RuntimeError(f"cell in {folder} did not finish in {max_attempts} attempts: {done.stderr[-1500:]}")


def outcome(folder: Path) -> dict:
    """What must not depend on interruptions: everything but clocks and paths."""
    import torch

    result = json.loads((folder / "result.json").read_text())
    history = [json.loads(line) for line in (folder / "val_history.jsonl").read_text().splitlines()]
    weights = torch.load(folder / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    with gzip.open(folder / "test_translations.jsonl.gz", "rt", encoding="utf-8") as handle:
        translations = handle.read()
    return {
        "stopped_by": result["stopped_by"],
        "steps": result["steps"],
        "best_step": result["best_step"],
        "validations": [(h["step"], h["overall"]) for h in history],
        "clock runs forward": all(a["seconds"] < b["seconds"] for a, b in zip(history, history[1:])),
        "test": (result["overall"], result["buckets"]),
        "length_penalty": {k: v for k, v in result["length_penalty"].items() if k != "seconds"},
        "translations": translations,
        "weights": weights,
    }


def differences(got: dict, want: dict) -> list[str]:
    import torch

    diffs = [key for key in want if key != "weights" and got[key] != want[key]]
    same_weights = got["weights"].keys() == want["weights"].keys() and all(
        torch.equal(got["weights"][k], want["weights"][k]) for k in want["weights"]
    )
    return diffs + ([] if same_weights else ["best.ckpt weights"])


def check(points: list[KillPoint], work: Path, extra: tuple = (), jobs: int = 0) -> list[dict]:
    """Run the uninterrupted cell and each kill point in ``work``; one row per kill point. ``extra``: callbacks
    every attempt of every cell runs with (e.g. :func:`average`). The cells are independent, one thread each, so
    ``jobs`` of them run side by side (default: one per core)."""
    plain = work / "uninterrupted"

    def killed(number: int, point: KillPoint) -> tuple[Path, int, float]:
        folder, start = work / f"kill_{number}", time.time()
        return folder, run_cell(folder, [*point.callbacks, *extra]), time.time() - start

    with ThreadPoolExecutor(jobs or len(os.sched_getaffinity(0))) as pool:
        uninterrupted = pool.submit(run_cell, plain, [*extra])
        runs = [pool.submit(killed, number, point) for number, point in enumerate(points)]
        uninterrupted.result()
        want = outcome(plain)
        if want["stopped_by"] != "patience":
            raise RuntimeError(f"the uninterrupted cell must stop by patience, not {want['stopped_by']}")
        rows = []
        for point, run in zip(points, runs):
            folder, attempts, seconds = run.result()
            got = outcome(folder)
            rows.append({"point": point.name, "attempts": attempts, "expected_attempts": point.attempts,
                         "differences": differences(got, want), "seconds": seconds,
                         "validations": len(got["validations"])})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", help="comma-separated kill point numbers (default: all)")
    parser.add_argument("--keep", help="keep the run folders here (default: a temporary folder, removed)")
    parser.add_argument("--average", type=float, help="train every cell with a moving average of this decay")
    parser.add_argument("--jobs", type=int, default=0, help="cells run side by side (default: one per core)")
    args = parser.parse_args()
    chosen = KILL_POINTS if not args.points else [KILL_POINTS[int(i)] for i in args.points.split(",")]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fault-injection-"))
    try:
        rows = check(chosen, work, () if args.average is None else (average(args.average),), args.jobs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("| kill point | attempts | validations | equal to the uninterrupted cell |\n|---|---|---|---|")
    for row in rows:
        verdict = "yes" if not row["differences"] else "NO: " + ", ".join(row["differences"])
        print(f"| {row['point']} | {row['attempts']} | {row['validations']} | {verdict} |")
    equal = sum(not row["differences"] and row["attempts"] == row["expected_attempts"] for row in rows)
    print(f"\n{equal} of {len(rows)} killed cells ended equal to the uninterrupted one")
    sys.exit(0 if equal == len(rows) else 1)


if __name__ == "__main__":
    main()
