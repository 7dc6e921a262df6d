"""Fault injection for the reliability tests (imported by training subprocesses via PYTHONPATH).

Each callback is named in a ``--trainer.callbacks`` argument of a real ``seq2seq-attn`` process.
The kills strike once per run folder (a marker file remembers), like a real crash: the
resumed run, which reads the same config.yaml, goes on.
"""

import os
import signal
import time
from pathlib import Path
from typing import Optional

import pytorch_lightning as pl
import torch


def first_time(trainer, name: str) -> bool:
    marker = Path(trainer.log_dir) / f".{name}"
    if marker.exists():
        return False
    marker.touch()
    return True


class KillAt(pl.Callback):
    """SIGKILL this process as training is about to run the step after ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and first_time(trainer, "killed"):
            os.kill(os.getpid(), signal.SIGKILL)


class PauseAt(pl.Callback):
    """Sleep ``seconds`` as training is about to run the step after ``step`` (once per run folder): a slow
    first attempt, whose training time a resumed run must still count."""

    def __init__(self, step: int, seconds: float) -> None:
        self.step, self.seconds = step, seconds

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and first_time(trainer, "paused"):
            time.sleep(self.seconds)


class KillDuringSave(pl.Callback):
    """SIGKILL this process in the middle of writing the first checkpoint saved after ``step``.

    The checkpoint's bytes are in the temporary file, the rename has not happened.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and first_time(trainer, "killed_during_save"):
            import seq2seq_attn.results as results

            def die(fd: int) -> None:
                os.kill(os.getpid(), signal.SIGKILL)

            results.os.fsync = die


class NaNAt(pl.Callback):
    """Make the weights NaN at ``step`` in the run seeded with ``seed`` (a diverging cell)."""

    def __init__(self, step: int, seed: int) -> None:
        self.step, self.seed = step, seed

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step and os.environ.get("PL_GLOBAL_SEED") == str(self.seed):
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


class KillAtTest(pl.Callback):
    """SIGKILL this process as it starts testing, after training has finished (once per run folder)."""

    def on_test_start(self, trainer, pl_module) -> None:
        if first_time(trainer, "killed_at_test"):
            os.kill(os.getpid(), signal.SIGKILL)


class KillPoint(pl.Callback):
    """SIGKILL this process at a named point of a run's life (once per run folder):

    - ``update``: in the middle of update ``step + 1``: its gradients computed, the optimizer step not taken;
    - ``batch``: as the update after ``step`` is about to start (after whatever was saved at ``step``);
    - ``validation``: in the middle of the validation at update ``step`` (its first batch done);
    - ``fit_end``: training over, before the cell records it (``fit.json``) or tests;
    - ``test``: in the middle of the test decode (its first batch done);
    - ``test_end``: the test scored and written, before the cell's ``result.json``;
    - ``resume``: as a resumed attempt starts training, its checkpoint loaded (a kill during the resume).
    """

    def __init__(self, point: str, step: int = 0) -> None:
        self.point, self.step = point, step

    def _kill(self, trainer, point: str, step: Optional[int] = None) -> None:
        due = point == self.point and (step is None or step == self.step)
        if due and first_time(trainer, f"killed_{self.point}_{self.step}"):
            os.kill(os.getpid(), signal.SIGKILL)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._kill(trainer, "update", trainer.global_step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._kill(trainer, "batch", trainer.global_step)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.state.fn == "fit":
            self._kill(trainer, "validation", trainer.global_step)

    def on_fit_end(self, trainer, pl_module) -> None:
        self._kill(trainer, "fit_end")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._kill(trainer, "test")

    def on_test_end(self, trainer, pl_module) -> None:
        self._kill(trainer, "test_end")

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.ckpt_path is not None:
            self._kill(trainer, "resume")
