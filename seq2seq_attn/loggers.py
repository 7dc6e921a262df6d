"""Loggers: Lightning's CSV logger that survives resumes, and W&B runs set up for comparing scorers.

W&B is optional at run time: nothing here imports ``wandb`` unless a run asks for it.
"""

import csv
import io
import netrc
import os
import socket
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from jsonargparse.typing import NonNegativeInt
from pytorch_lightning.loggers import CSVLogger as LightningCSVLogger

from seq2seq_attn.results import write_atomic


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger that continues an existing ``metrics.csv`` instead of deleting it.

    A resumed run (``seq2seq-attn resume``) writes into its old folder, where
    Lightning's writer would delete the earlier rows. Rows of steps between the last
    checkpoint and the crash appear twice; the later ones are the resumed run's.
    """

    @property
    def experiment(self):
        if self._experiment is None:
            path = os.path.join(self.log_dir, "metrics.csv")
            previous = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
            with warnings.catch_warnings():
                if previous:
                    warnings.filterwarnings("ignore", message=".*Previous log files in this directory.*")
                writer = super().experiment  # deletes an existing metrics.csv
            if previous:
                write_atomic(path, previous)
                writer.metrics_keys = sorted(next(csv.reader(io.StringIO(previous)), []))
        return super().experiment


@dataclass
class WandbConfig:
    """The ``wandb:`` section of a config; ``--config experiments/loggers/wandb.yaml`` switches it on.

    Args:
        enabled: add a W&B run beside the CSV logger.
        project, entity: where the run goes.
        group: the ablation's name (set by ``seq2seq-attn ablate``); runs of one grid share it.
        name: the run's name; defaults to the CSV run folder, e.g. ``toy_reverse/version_3``.
        tags: extra tags; ``attention:…``, ``flow:…``, ``cell:…``, ``dataset:…`` and ``seed:…`` are added.
        mode: ``online``, ``offline`` or ``disabled``; by default ``$WANDB_MODE``, else online when
            credentials are set up and api.wandb.ai answers, else offline (upload later with ``wandb sync``).
        id: continue this W&B run (``seq2seq-attn resume`` sets it).
        log_model: upload the best checkpoint as an artifact at the end (online runs only).
        heatmaps: validation/test examples whose attention maps are logged as images.
        samples: rows of the sample-translations table.
    """

    enabled: bool = False
    project: str = "seq2seq-attn"
    entity: Optional[str] = None
    group: Optional[str] = None
    name: Optional[str] = None
    tags: list[str] = field(default_factory=list)
    mode: Optional[Literal["online", "offline", "disabled"]] = None
    id: Optional[str] = None
    log_model: bool = False
    heatmaps: NonNegativeInt = 4
    samples: NonNegativeInt = 8


def _credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        hosts = netrc.netrc(os.environ.get("NETRC")).hosts
    except (OSError, netrc.NetrcParseError):
        return False
    return any("wandb" in host for host in hosts)


def _reachable(host: str = "api.wandb.ai", timeout: float = 2.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def wandb_mode(requested: Optional[str]) -> str:
    """The mode a run uses: never a login prompt, never a hang without network."""
    if requested:
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if _credentials() and _reachable() else "offline"


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model": {"attention": "dot"}}`` -> ``{"model.attention": "dot"}``."""
    if isinstance(config, dict):
        out: dict[str, Any] = {}
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: config}


def run_keys(config: dict) -> dict[str, Any]:
    """The keys dashboards group by: attention, flow, input_feed, cell, dataset, task, seed."""
    model, data = config.get("model") or {}, config.get("data") or {}
    init = data.get("init_args") or {}
    if init.get("corpus"):
        dataset, task = f"{init['corpus']}_{init.get('src_lang')}_{init.get('trg_lang')}", "translation"
    else:
        dataset, task = f"toy_{init.get('task', 'reverse')}", init.get("task", "reverse")
    flow = model.get("flow")
    return {
        "attention": model.get("attention"),
        "flow": flow,
        "input_feed": bool(model.get("input_feed")) if flow == "luong" else None,
        "cell": model.get("cell"),
        "dataset": dataset,
        "task": task,
        "seed": config.get("seed_everything"),
    }


def make_wandb_logger(options: WandbConfig, config: dict, job_type: str, run_dir: Path, name: Optional[str]):
    """Lightning's WandbLogger for this run, with the full config, grouping keys and tags."""
    from pytorch_lightning.loggers import WandbLogger

    keys = run_keys(config)
    tags = [f"{k}:{v}" for k, v in keys.items() if v is not None and k != "task"] + list(options.tags)
    mode = wandb_mode(options.mode)
    run_dir.mkdir(parents=True, exist_ok=True)
    return WandbLogger(
        project=options.project,
        entity=options.entity,
        name=options.name or name,
        save_dir=str(run_dir),
        id=options.id,
        log_model=options.log_model and mode == "online",
        group=options.group,
        job_type=job_type,
        tags=tags,
        config={**flatten(config), **keys},
        mode=mode,
    )


def finish_wandb() -> None:
    """End the process's W&B run, if any (the next run in this process must not reuse it)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
