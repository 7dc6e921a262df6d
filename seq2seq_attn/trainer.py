"""The Lightning Trainer of ``seq2seq-attn``: Lightning's, plus ``precision: bf16-compute`` and ``auto``.

``--trainer.precision bf16-compute`` trains with bf16 copies of the weights made once per step and fp32
master weights (:class:`BF16Compute`, :func:`seq2seq_attn.precision.bf16_weights`).
``--trainer.precision auto`` (or ``trainer: {precision: auto}`` in a config) resolves to
``bf16-mixed`` or ``32-true`` through :func:`seq2seq_attn.precision.training_precision` before the
Trainer is built; every other value goes to Lightning unchanged. The run folder gets a
``precision.json`` with what was asked, what was chosen and why, and the console one line.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Optional, Union

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.precision.precision import _PRECISION_INPUT
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.plugins.precision import Precision

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.precision import PrecisionChoice, bf16_weights, describe, training_precision
from seq2seq_attn.results import write_json


class BF16Compute(Precision):
    """bf16 compute with fp32 master weights: every training, validation, test and predict step runs
    inside :func:`~seq2seq_attn.precision.bf16_weights` on the LightningModule, so its weights are cast
    once per step and the optimiser, gradient clipping and checkpoints work on the fp32 weights."""

    precision = "bf16-compute"

    def __init__(self) -> None:
        self.module: Optional[torch.nn.Module] = None

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        self.module = module  # the LightningModule, before a strategy wraps it
        return module

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        with bf16_weights(self.module) if self.module is not None else contextlib.nullcontext():
            yield


class PrecisionRecord(Callback):
    """Writes the run's precision choice into its folder when fitting, testing or validating starts."""

    def __init__(self, choice: PrecisionChoice) -> None:
        self.choice = choice

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a broadcast: every rank asks
        if trainer.is_global_zero:
            write_json(run_dir / "precision.json", self.choice.to_json())


def _as_list(value: object) -> list:
    """A Trainer argument that takes one object or a list of them (callbacks, plugins), as a list."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


class Trainer(pl.Trainer):
    """:class:`pytorch_lightning.Trainer` that also accepts ``precision="bf16-compute"`` and ``"auto"``."""

    def __init__(
        self, *args, precision: Optional[Union[_PRECISION_INPUT, Literal["bf16-compute", "auto"]]] = None, **kwargs
    ) -> None:
        choice = None
        if precision == "auto":
            choice = training_precision(kwargs.get("accelerator", "auto"))
            print(describe(choice), flush=True)
            precision = choice.precision
            kwargs["callbacks"] = [*_as_list(kwargs.get("callbacks")), PrecisionRecord(choice)]
        if precision == BF16Compute.precision:
            plugins = _as_list(kwargs.get("plugins"))
            if any(isinstance(p, Precision) for p in plugins):
                raise ConfigError(
                    "precision bf16-compute is a precision plugin itself: drop the other from trainer.plugins"
                )
            kwargs["plugins"], precision = [*plugins, BF16Compute()], None
        super().__init__(*args, precision=precision, **kwargs)
        self.precision_choice = choice
