"""The Lightning Trainer of ``seq2seq-attn``: Lightning's, plus ``precision: auto``.

``--trainer.precision auto`` (or ``trainer: {precision: auto}`` in a config) resolves to
``bf16-mixed`` or ``32-true`` through :func:`seq2seq_attn.precision.training_precision` before the
Trainer is built; every other value goes to Lightning unchanged. The run folder gets a
``precision.json`` with what was asked, what was chosen and why, and the console one line.
"""

from pathlib import Path
from typing import Literal, Optional, Union

import pytorch_lightning as pl
from lightning_fabric.plugins.precision.precision import _PRECISION_INPUT
from pytorch_lightning.callbacks import Callback

from seq2seq_attn.precision import PrecisionChoice, describe, training_precision
from seq2seq_attn.results import write_json


class PrecisionRecord(Callback):
    """Writes the run's precision choice into its folder when fitting, testing or validating starts."""

    def __init__(self, choice: PrecisionChoice) -> None:
        self.choice = choice

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        run_dir = Path(trainer.log_dir or trainer.default_root_dir)  # a broadcast: every rank asks
        if trainer.is_global_zero:
            write_json(run_dir / "precision.json", self.choice.to_json())


class Trainer(pl.Trainer):
    """:class:`pytorch_lightning.Trainer` that also accepts ``precision="auto"``."""

    def __init__(
        self, *args, precision: Optional[Union[_PRECISION_INPUT, Literal["auto"]]] = None, **kwargs
    ) -> None:
        choice = None
        if precision == "auto":
            choice = training_precision(kwargs.get("accelerator", "auto"))
            print(describe(choice), flush=True)
            precision = choice.precision
            callbacks = kwargs.get("callbacks")
            callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, list) else [callbacks]
            kwargs["callbacks"] = [*callbacks, PrecisionRecord(choice)]
        super().__init__(*args, precision=precision, **kwargs)
        self.precision_choice = choice
