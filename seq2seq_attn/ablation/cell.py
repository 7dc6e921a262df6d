"""Fit and test one grid cell in this process; run by the ablation runner.

    python -m seq2seq_attn.ablation.cell CELL_DIR -- [LightningCLI arguments]

Writes ``CELL_DIR/result.json`` (atomically, last) on success, or
``CELL_DIR/error.json`` with a one-line message on failure. A cell with a
``result.json`` is finished; the runner never runs it again. A cell that was
killed while training continues from its ``checkpoints/last.ckpt``; one killed
after training (``fit.json`` written) tests the same best checkpoint again.
"""

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

from seq2seq_attn.checkpointing import LAST, logger_in_folder, read_checkpoint_step
from seq2seq_attn.errors import find_config_error
from seq2seq_attn.loggers import finish_wandb
from seq2seq_attn.results import LENGTH_PENALTY, write_json

RESULT, ERROR, FIT = "result.json", "error.json", "fit.json"
FINAL = "final.ckpt"  # the weights at the end of fit, where no validation chose a best checkpoint


def why_stopped(trainer) -> str:
    """What ended fit: ``patience``, another early-stopping rule (``early_stopping: <its reason>``: a
    threshold or a non-finite metric), ``trainer.max_steps``, ``trainer.max_time``, ``trainer.max_epochs``,
    else ``unknown`` (a callback that set ``trainer.should_stop``)."""
    from pytorch_lightning.callbacks import EarlyStopping, Timer
    from pytorch_lightning.callbacks.early_stopping import EarlyStoppingReason

    stops = [c for c in trainer.callbacks if isinstance(c, EarlyStopping)]
    reasons = [c.stopping_reason for c in stops if c.stopping_reason != EarlyStoppingReason.NOT_STOPPED]
    if EarlyStoppingReason.PATIENCE_EXHAUSTED in reasons:
        return "patience"
    if reasons:
        return f"early_stopping: {reasons[0].value}"
    if trainer.max_steps is not None and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps:
        return "trainer.max_steps"
    remaining = [c.time_remaining() for c in trainer.callbacks if isinstance(c, Timer)]  # None: no duration
    if any(r is not None and r <= 0 for r in remaining):
        return "trainer.max_time"
    if trainer.max_epochs is not None and trainer.max_epochs >= 0 and trainer.current_epoch >= trainer.max_epochs:
        return "trainer.max_epochs"
    return "unknown"


def shortfall(trainer, stopped_by: str) -> tuple[Optional[str], Optional[str]]:
    """``(stopped_short, hit_cap)``: why a cell is not the run the grid asked for, or None each.

    Such a cell is finished (it is tested and never run again), but a cap hit on a busy machine must
    not be read as the model's quality: the runner's line and the report say so. A cell with early
    stopping asked to train until dev stopped improving; it ``hit_cap`` when a cap ended it first. A
    cell without it asked for ``trainer.max_steps`` updates; it ``stopped_short`` when something else
    (the time cap, the epochs) ended it first. Rerun it by deleting its ``result.json``."""
    from pytorch_lightning.callbacks import EarlyStopping

    done = trainer.global_step
    if any(isinstance(c, EarlyStopping) for c in trainer.callbacks):
        if stopped_by == "patience":
            return None, None
        return None, f"reached {stopped_by} at update {done} before dev stopped improving"
    target = trainer.max_steps
    if target is None or target < 0 or done >= target:
        return None, None
    why = "early stopping" if stopped_by == "patience" else stopped_by
    if stopped_by == "trainer.max_epochs":
        why = f"trainer.max_epochs ({trainer.max_epochs})"
    return f"stopped at update {done} of {target} by {why}", None


def training_seconds(trainer, fit_seconds: float) -> float:
    """Seconds of fit over all attempts (a resumed cell's own fit_seconds count only its last attempt): those
    of the time cap's Timer, which the cap is measured by, else the module's own clock (both are carried
    through checkpoints), else this attempt's."""
    from pytorch_lightning.callbacks import Timer

    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    if timers:
        return timers[0].time_elapsed("train")
    clock = getattr(trainer.lightning_module, "fit_seconds", None)
    seconds = clock() if callable(clock) else None
    return seconds if seconds is not None else fit_seconds


def logger_args(cell_dir: Path) -> list[str]:
    """A CSV logger writing into the cell folder, so metrics and checkpoints land there."""
    csv_logger = logger_in_folder({"class_path": "seq2seq_attn.loggers.CSVLogger"}, cell_dir)
    return ["--trainer.logger", json.dumps(csv_logger)]


def training_budget(trainer) -> dict:
    """The caps a cell trained under: ``trainer.max_steps``, ``max_epochs`` and ``max_time`` (seconds)."""
    from pytorch_lightning.callbacks import Timer

    seconds = next((c._duration for c in trainer.callbacks if isinstance(c, Timer)), None)
    return {"max_steps": trainer.max_steps, "max_epochs": trainer.max_epochs, "max_time": seconds}


def fit(cli, cell_dir: Path) -> dict:
    """Train the cell (continuing from its ``last.ckpt`` if it was killed) and record how training went in
    ``fit.json``. A cell killed after that (while testing) reads it back instead of training again, unless
    its caps have changed since (a cell that hit a cap, run again with a higher one, trains on from
    ``last.ckpt``; one that early stopping ended stays ended)."""
    done, budget = cell_dir / FIT, training_budget(cli.trainer)
    if done.is_file():
        training = json.loads(done.read_text())
        if training.pop("budget", None) == budget:
            return training
    start = time.time()
    last = cell_dir / "checkpoints" / LAST  # a cell killed earlier continues where it stopped
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=last if last.is_file() else None)
    fit_seconds = time.time() - start
    stopped_by = why_stopped(cli.trainer)
    training = {"fit_seconds": round(fit_seconds, 1), "epochs": cli.trainer.current_epoch,
                "steps": cli.trainer.global_step, "stopped_by": stopped_by,
                "train_seconds": round(training_seconds(cli.trainer, fit_seconds), 1)}  # fmt: skip
    training["stopped_short"], training["hit_cap"] = shortfall(cli.trainer, stopped_by)
    best = cli.trainer.checkpoint_callback.best_model_path
    if not best:  # no validation chose one: the weights fit ended with, saved so that a retest reads them too
        best = str(cell_dir / "checkpoints" / FINAL)
        cli.trainer.save_checkpoint(best)
    training["best_step"], training["checkpoint"] = read_checkpoint_step(best), best
    write_json(done, {**training, "budget": budget})
    return training


def run(cell_dir: Path, args: list[str]) -> dict:
    from seq2seq_attn.lightning_cli import make_cli

    overrides = ["--trainer.default_root_dir", str(cell_dir), "--trainer.enable_progress_bar", "false"]
    cli = make_cli([*args, *overrides, *logger_args(cell_dir)], run=False)
    training = fit(cli, cell_dir)
    start = time.time()
    cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=training["checkpoint"])
    results = json.loads((cell_dir / "test_results.json").read_text())
    results["test_seconds"] = round(time.time() - start, 1)  # with the length-penalty search, if any
    if (cell_dir / LENGTH_PENALTY).is_file():  # the protocol's search stays the headline; the tuned one beside it
        results["length_penalty"] = json.loads((cell_dir / LENGTH_PENALTY).read_text())
    results.update(training, precision=str(cli.trainer.precision))
    return results


def run_and_record(cell_dir: Path, args: list[str]) -> int:
    """Run the cell; ``result.json`` on success, a one-line ``error.json`` on failure. Returns an exit code."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / ERROR).unlink(missing_ok=True)
    try:
        results = run(cell_dir, args)
    except BaseException as err:  # noqa: BLE001 - every failure is recorded, then returned as an exit code
        cause = find_config_error(err) or err
        message = f"{type(cause).__name__}: {cause}".splitlines()[0]
        last = cell_dir / "checkpoints" / LAST
        if last.is_file() and str(last) not in message:
            message += f" (last good checkpoint: {last})"
        write_json(cell_dir / ERROR, {"error": message, "traceback": traceback.format_exc()})
        print(f"error: {message}", file=sys.stderr)
        return 1
    finally:
        finish_wandb()
    write_json(cell_dir / RESULT, results)
    return 0


def main() -> None:
    from seq2seq_attn.cpu import configure

    configure()  # CPU settings (seq2seq_attn/cpu.py) before any torch work: threads inherit them
    cell_dir = Path(sys.argv[1])
    args = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    sys.exit(run_and_record(cell_dir, args))


if __name__ == "__main__":
    main()
