"""An exponential moving average of the weights: what is validated, tested and checkpointed (Polyak averaging).

Training steps the raw weights as before; after every update an average follows them,
``w_avg <- d w_avg + (1 - d) w``, and validation, early stopping, ``best.ckpt``, test and decoding all see the
average. With a constant learning rate, dev BLEU of the raw weights jumps from one validation to the next by a
BLEU or more (the steps' noise); the average smooths it out, as Marian's ``--exponential-smoothing`` and
checkpoint averaging do. The training trajectory is unchanged: the same seed gives the same raw weights with and
without averaging.

The decay warms up as TensorFlow's ``ExponentialMovingAverage`` with ``num_updates`` does:
``d_n = min(decay, (1 + n) / (warmup + n))`` at the n-th update (``warmup`` 10, TensorFlow's), so the average
spans about the last ``1 / (warmup - 1)`` of training (a ninth) until ``decay`` caps it (at n = 8,990 for
0.999) and the first validations do not see the initial weights.

A checkpoint holds the average as its ``state_dict`` (what :func:`~seq2seq_attn.inference.load_model` and
``test`` load) and the raw weights beside it, so a killed run resumes both exactly.
"""

from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.trainer.states import TrainerFn
from torch.optim.swa_utils import AveragedModel

from seq2seq_attn.errors import ConfigError


def ema_update(
    decay: float, warmup: float = 10.0
) -> Callable[[list[torch.Tensor], list[torch.Tensor], torch.Tensor], None]:
    """The averaging step over all parameters at once (one foreach ``lerp``): ``(averages, weights, n)``,
    ``n`` the updates averaged so far. A Python loop over parameters costs 10x more per update on CPU."""

    @torch.no_grad()
    def update(averages: list[torch.Tensor], weights: list[torch.Tensor], averaged: torch.Tensor) -> None:
        n = float(averaged)
        d = min(decay, (1.0 + n) / (warmup + n))
        torch._foreach_lerp_(averages, weights, 1.0 - d)

    return update


class ExponentialAverage(WeightAveraging):
    """Validate, test and checkpoint an exponential moving average of the weights (see the module docstring).

    Args:
        decay: the largest decay ``d`` (0.999: an average over about the last 1,000 updates once warmed up).
        warmup: ``d_n = min(decay, (1 + n) / (warmup + n))``; larger averages over a longer tail of training.
    """

    def __init__(self, decay: float = 0.999, warmup: float = 10.0) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"ExponentialAverage decay must be in (0, 1), got {decay}: e.g. 0.999")
        if warmup <= 1.0:
            raise ConfigError(f"ExponentialAverage warmup must be above 1, got {warmup}: e.g. 10 (TensorFlow's)")
        self.decay, self.warmup = decay, warmup
        # weights only: the buffers are constants (a rotary table, a head scale), some not float
        super().__init__(use_buffers=False, multi_avg_fn=ema_update(decay, warmup))

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        """Resuming a fit restores the raw weights and the average; ``test`` and ``validate`` load the average
        (the checkpoint's ``state_dict``) and nothing more, also in the process that fitted (Lightning's callback
        would put the raw weights back there)."""
        if self._average_model is not None and trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "decay": self.decay, "warmup": self.warmup}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name in ("decay", "warmup"):
            saved, ours = state_dict.get(name, getattr(self, name)), getattr(self, name)
            if saved != ours:
                raise ConfigError(
                    f"the checkpoint averaged its weights with {name} {saved}, the config says {ours}: "
                    f"resume with the checkpoint's {name}, or start a new run"
                )
        super().load_state_dict(state_dict)


SNAPSHOTS = "average_snapshots"  # AverageSnapshots' folder in the run folder


class AverageSnapshots(pl.Callback):
    """Averages of other horizons carried beside training, for a screen of the horizon in one run.

    One moving average per ``warmup``, kept exactly as :class:`ExponentialAverage` keeps its own (the same
    :func:`ema_update` after every update, weights only, with its ``decay``), each written every ``every`` updates to
    ``average_snapshots/warmup<w>/step<n>.pt`` in the run folder. Validation, early stopping and checkpoints never
    see them; ``benchmarks/average_horizon.py`` validates them afterwards.

    Args:
        warmups: one average per value, as :class:`ExponentialAverage`'s ``warmup`` (its own value repeats the
            validated average: a check).
        every: write the averages every this many updates (the validation interval, to compare with it).
    """

    def __init__(self, warmups: list[float], every: int = 400) -> None:
        if not warmups or len(set(warmups)) != len(warmups) or min(warmups) <= 1.0:
            raise ConfigError(f"AverageSnapshots warmups must be distinct and above 1, got {warmups}: e.g. [10, 20]")
        if every < 1:
            raise ConfigError(f"AverageSnapshots every must be a positive number of updates, got {every}: e.g. 400")
        self.warmups, self.every = [float(w) for w in warmups], every
        self.averages: dict[float, AveragedModel] = {}
        self.folder, self.latest = Path(SNAPSHOTS), 0

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage != "fit":
            return
        validated = [c for c in trainer.callbacks if isinstance(c, ExponentialAverage)]
        if len(validated) != 1:
            raise ConfigError(
                "AverageSnapshots carries averages beside the validated one: add one "
                "seq2seq_attn.averaging.ExponentialAverage to trainer.callbacks (as fast.yaml does)"
            )
        self.folder, self.latest = Path(trainer.log_dir or trainer.default_root_dir) / SNAPSHOTS, 0
        self.averages = {  # as WeightAveraging builds its average: weights only, the buffers are constants
            w: AveragedModel(pl_module, use_buffers=False, multi_avg_fn=ema_update(validated[0].decay, w))
            for w in self.warmups
        }

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", *args: Any) -> None:
        step = trainer.global_step
        if step <= self.latest:
            return
        self.latest = step
        for w, average in self.averages.items():
            average.update_parameters(pl_module)  # the raw weights: a validation swaps the average in only later
            if step % self.every == 0 and trainer.is_global_zero:
                folder = self.folder / f"warmup{w:g}"
                folder.mkdir(parents=True, exist_ok=True)
                torch.save(average.module.state_dict(), folder / f"step{step}.pt")

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            raise ConfigError(
                "AverageSnapshots cannot resume a fit (its averages are not checkpointed): delete the run's "
                f"checkpoints/last.ckpt and {SNAPSHOTS}/ to train the screen from its start"
            )
