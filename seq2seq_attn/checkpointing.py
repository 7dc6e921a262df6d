"""Checkpoints a killed run can resume from, exactly.

- :class:`SafeCheckpointIO` writes every checkpoint to a temporary file, syncs
  it and renames it over the old one (a kill during a save leaves the previous
  checkpoint intact, never half a file), and loads with ``weights_only=True``, so
  a crafted checkpoint given to resume, fit or test cannot run code.
- :class:`BestCheckpoint` keeps ``checkpoints/best.ckpt``, the best validation by a chosen metric.
- :class:`LastCheckpoint` keeps ``checkpoints/last.ckpt`` fresh every N optimizer
  steps and at the end of every epoch, and never saves non-finite weights.
- :class:`RNGState` carries the random generators' states in every checkpoint
  and restores them just before the first resumed batch, so dropout continues
  as in an uninterrupted run (the data order is restored by
  :class:`~seq2seq_attn.data.sampler.ResumableLoader`).
- :func:`resume_args` turns a run folder into the ``fit`` arguments that resume it
  in place, continuing its W&B run if it had one (``seq2seq-attn resume RUN_DIR``).
"""

import io
import json
import pickle
import random
import zipfile
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
import pytorch_lightning as pl
import torch
import yaml
from jsonargparse.typing import NonNegativeInt
from pytorch_lightning.callbacks import Checkpoint, EarlyStopping, ModelCheckpoint
from pytorch_lightning.callbacks.early_stopping import EarlyStoppingReason
from pytorch_lightning.plugins.io import CheckpointIO, TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.results import write_atomic

LAST, BEST = "last.ckpt", "best.ckpt"


def load_checkpoint_file(path: Union[str, Path], map_location: Any = "cpu") -> Any:
    """``torch.load(weights_only=True)`` of ``path``: tensors and plain containers only, so a
    crafted file runs no code. A missing, truncated, corrupt or crafted file is one
    :class:`ConfigError` that names it, on every path that reads a checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint not found: {path}: pass RUN_DIR/checkpoints/best.ckpt of a finished run")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(
            f"cannot load {path} safely: {first[:160]}: it is not an intact seq2seq-attn checkpoint "
            "(truncated or corrupt: use another one, e.g. best.ckpt instead of last.ckpt)"
        ) from err


def read_checkpoint(path: Union[str, Path], device: str = "cpu") -> dict:
    """A seq2seq-attn checkpoint's contents (hyperparameters, weights, vocabularies), read safely."""
    checkpoint = load_checkpoint_file(path, device)
    if not isinstance(checkpoint, dict) or "hyper_parameters" not in checkpoint or "vocab" not in checkpoint:
        raise ConfigError(f"{path} is not a seq2seq-attn checkpoint (no hyperparameters or vocabulary in it)")
    return checkpoint


def read_checkpoint_step(path: Union[str, Path]) -> int:
    """The update a checkpoint was saved at (its weights are mapped, not read)."""
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])


def read_checkpoint_hparams(path: Union[str, Path]) -> dict:
    return dict(read_checkpoint(path)["hyper_parameters"])


def with_safe_checkpoint_io(plugins: Any) -> list:
    """The trainer's plugins with :class:`SafeCheckpointIO` among them: a user's ``trainer.plugins``
    adds to it; another checkpoint IO would replace atomic saves and safe loads, so it is refused."""
    plugins = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    others = [p for p in plugins if isinstance(p, CheckpointIO) and not isinstance(p, SafeCheckpointIO)]
    if others:
        raise ConfigError(
            f"trainer.plugins sets its own checkpoint IO ({type(others[0]).__name__}): seq2seq-attn saves "
            "and loads checkpoints with SafeCheckpointIO (atomic saves, loads that run no code); remove it"
        )
    if not any(isinstance(p, SafeCheckpointIO) for p in plugins):
        plugins.append(SafeCheckpointIO())
    return plugins


class SafeCheckpointIO(TorchCheckpointIO):
    """Atomic saves (temporary file, fsync, rename) and loads that never unpickle code."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Union[str, Path], storage_options=None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        path = Path(path)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-save
            stale.unlink(missing_ok=True)
        write_atomic(path, buffer.getbuffer())

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location or (lambda storage, loc: storage))


def checkpoint_dir(trainer: "pl.Trainer") -> Path:
    """Where this run's checkpoints go: beside ModelCheckpoint's, else ``<log dir>/checkpoints``."""
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            return Path(callback.dirpath)
    return Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"


def validation_follows(trainer: "pl.Trainer") -> bool:
    """Whether Lightning validates right after the training batch that has just ended (its own rule)."""
    epoch_loop = trainer.fit_loop.epoch_loop
    return bool(epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher))


class BestCheckpoint(ModelCheckpoint):
    """``checkpoints/best.ckpt``: the weights of the validation with the best ``monitor`` (config group
    ``best_checkpoint``), the ones ``test`` and the ablation cells evaluate. Training to convergence on
    real text monitors ``val/bleu`` with mode ``max``; the default is the validation loss."""

    def __init__(self, monitor: str = "val/loss", mode: Literal["min", "max"] = "min") -> None:
        super().__init__(monitor=monitor, mode=mode, filename=Path(BEST).stem, enable_version_counter=False)


class LastCheckpoint(Checkpoint):
    """Saves ``checkpoints/last.ckpt`` every ``every_n_steps`` optimizer steps, after every validation and at
    the end of each epoch, so that a killed run resumed from it is the run it would have been.

    A killed run resumes from it with ``seq2seq-attn resume RUN_DIR`` and loses at
    most ``every_n_steps`` steps (0: only after validations). Weights that are no
    longer finite are never saved: training stops with a FloatingPointError and the
    last good checkpoint stays.

    Exactness under early stopping rests on three rules:

    - a step that a validation follows is saved after that validation, never before it: Lightning resumes a
      checkpoint saved at the end of a training batch as if the batch's validation had run, so a kill
      before the next save would lose a validation (early stopping's count, the best checkpoint);
    - it is a :class:`~pytorch_lightning.callbacks.Checkpoint`, which Lightning calls after the other
      callbacks: the saved state includes what early stopping and ``best.ckpt`` made of that validation;
    - a run that early stopping had ended stays ended when it is resumed (Lightning restores the callback's
      decision but not the trainer's stop).
    """

    def __init__(self, every_n_steps: NonNegativeInt = 100) -> None:
        self.every_n_steps = every_n_steps
        self._saved_step = -1

    def on_train_start(self, trainer, pl_module) -> None:
        if any(isinstance(c, EarlyStopping) and c.stopping_reason != EarlyStoppingReason.NOT_STOPPED
               for c in trainer.callbacks):  # fmt: skip
            trainer.should_stop = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches  # saved at the epoch's end instead
        due = self.every_n_steps and step % self.every_n_steps == 0 and step != self._saved_step
        if due and not last_of_epoch and not validation_follows(trainer):
            self.save(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        epoch_loop = trainer.fit_loop.epoch_loop
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking:
            return
        if epoch_loop.batch_progress.current.completed < trainer.num_training_batches:  # the epoch's end saves too
            self.save(trainer, pl_module)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # after the epoch's validation: a resumed run starts the next epoch (saving in
        # on_validation_end instead makes Lightning skip an epoch on resume)
        self.save(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step != self._saved_step:  # stopped by max_time/max_steps mid-epoch
            self.save(trainer, pl_module)

    def save(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        path = checkpoint_dir(trainer) / LAST
        for name, param in pl_module.named_parameters():
            if not torch.isfinite(param).all():
                kept = f"the last good checkpoint {path} is kept" if path.is_file() else "no checkpoint was saved"
                raise FloatingPointError(
                    f"weight {name} is not finite at step {trainer.global_step}: training diverged; {kept}; "
                    "lower the lr or clip gradients (trainer.gradient_clip_val)"
                )
        trainer.save_checkpoint(path, weights_only=False)
        self._saved_step = trainer.global_step


class RNGState(pl.Callback):
    """Random generators' states in every checkpoint, restored before the first resumed batch."""

    def __init__(self) -> None:
        self._pending: Optional[dict] = None

    def state_dict(self) -> dict[str, Any]:
        numpy_state = np.random.get_state(legacy=False)
        return {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": random.getstate(),
            "numpy": {"key": numpy_state["state"]["key"].tolist(), "pos": numpy_state["state"]["pos"]},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict  # applied at the first batch: loading data may still draw numbers

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        state, self._pending = self._pending, None
        if state is None:
            return
        torch.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
        key = np.asarray(state["numpy"]["key"], dtype=np.uint32)
        np.random.set_state({"bit_generator": "MT19937", "state": {"key": key, "pos": state["numpy"]["pos"]}})


def logger_in_folder(logger: Any, run_dir: Path) -> Any:
    """A logger config that writes into ``run_dir`` itself (CSV, TensorBoard: save_dir/name/version)."""
    if isinstance(logger, list):
        return [logger_in_folder(item, run_dir) for item in logger]
    if not isinstance(logger, dict) or "class_path" not in logger:
        return logger
    args = {**(logger.get("init_args") or {}), "save_dir": str(run_dir), "name": "", "version": ""}
    return {**logger, "init_args": args}


def resume_args(run_dir: Union[str, Path]) -> list[str]:
    """``fit`` arguments that resume the run in ``run_dir`` from its last checkpoint, in the same folder."""
    run_dir = Path(run_dir)
    config, last = run_dir / "config.yaml", run_dir / "checkpoints" / LAST
    if not config.is_file():
        raise ConfigError(
            f"no config.yaml in {run_dir}: pass the folder of a run started with `seq2seq-attn fit` "
            "(it holds config.yaml and checkpoints/)"
        )
    if not last.is_file():
        raise ConfigError(
            f"no checkpoints/{LAST} in {run_dir}: the run saved no checkpoint before it stopped; "
            f"start it again with `seq2seq-attn fit --config {config}`"
        )
    logger = (yaml.safe_load(config.read_text()) or {}).get("trainer", {}).get("logger")
    args = ["fit", "--config", str(config), "--ckpt_path", str(last)]
    if isinstance(logger, (dict, list)):
        args += ["--trainer.logger", json.dumps(logger_in_folder(logger, run_dir))]
    wandb_run = run_dir / "wandb_run.json"
    if wandb_run.is_file():  # continue the same W&B run
        args += ["--wandb.id", json.loads(wandb_run.read_text())["id"]]
    return args
