"""An exponential moving average of the weights: what is validated, tested and checkpointed (Polyak averaging).

Training steps the raw weights as before; after every update an average follows them,
``w_avg <- d w_avg + (1 - d) w``, and validation, early stopping, ``best.ckpt``, test and decoding all see the
average. With a constant learning rate, dev BLEU of the raw weights jumps from one validation to the next by a
BLEU or more (the steps' noise); the average smooths it out, as Marian's ``--exponential-smoothing`` and
checkpoint averaging do. The training trajectory is unchanged: the same seed gives the same raw weights with and
without averaging.

The decay warms up as TensorFlow's ``ExponentialMovingAverage`` with ``num_updates`` does:
``d_n = min(decay, (1 + n) / (10 + n))`` at the n-th update, so the average spans about the last tenth of
training until ``decay`` caps it (at n = 8,990 for 0.999) and the first validations do not see the initial
weights. A checkpoint holds the average as its ``state_dict`` (what :func:`~seq2seq_attn.inference.load_model`
and ``test`` load) and the raw weights beside it, so a killed run resumes both exactly.
"""

from typing import Any, Callable

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.trainer.states import TrainerFn

from seq2seq_attn.errors import ConfigError


def ema_update(decay: float) -> Callable[[list[torch.Tensor], list[torch.Tensor], torch.Tensor], None]:
    """The averaging step over all parameters at once (one foreach ``lerp``): ``(averages, weights, n)``,
    ``n`` the updates averaged so far. A Python loop over parameters costs 10x more per update on CPU."""

    @torch.no_grad()
    def update(averages: list[torch.Tensor], weights: list[torch.Tensor], averaged: torch.Tensor) -> None:
        n = float(averaged)
        d = min(decay, (1.0 + n) / (10.0 + n))
        torch._foreach_lerp_(averages, weights, 1.0 - d)

    return update


class ExponentialAverage(WeightAveraging):
    """Validate, test and checkpoint an exponential moving average of the weights (see the module docstring).

    Args:
        decay: the largest decay ``d`` (0.999: an average over about the last 1,000 updates once warmed up).
    """

    def __init__(self, decay: float = 0.999) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"ExponentialAverage decay must be in (0, 1), got {decay}: e.g. 0.999")
        self.decay = decay
        # weights only: the buffers are constants (a rotary table, a head scale), some not float
        super().__init__(use_buffers=False, multi_avg_fn=ema_update(decay))

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        """Resuming a fit restores the raw weights and the average; ``test`` and ``validate`` load the average
        (the checkpoint's ``state_dict``) and nothing more, also in the process that fitted (Lightning's callback
        would put the raw weights back there)."""
        if self._average_model is not None and trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "decay": self.decay}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("decay", self.decay) != self.decay:
            raise ConfigError(
                f"the checkpoint averaged its weights with decay {state_dict['decay']}, the config says {self.decay}: "
                "resume with the checkpoint's decay, or start a new run"
            )
        super().load_state_dict(state_dict)
