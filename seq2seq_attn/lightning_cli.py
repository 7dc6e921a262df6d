"""The LightningCLI of ``seq2seq-attn`` (fit, validate, test, predict): config parsing,
one-line config errors, the checkpoint's architecture winning over the configs, W&B.

Module-level classes, so that DDP's spawned processes can pickle what refers to them;
imported lazily by the entry point (:mod:`seq2seq_attn.cli`), which stays fast for the
tool commands (:mod:`seq2seq_attn.tool_commands`).
"""

import difflib
import re
import sys
from pathlib import Path
from typing import Optional

from pytorch_lightning.cli import LightningArgumentParser, LightningCLI

from seq2seq_attn.architecture import ARCHITECTURE_KEYS
from seq2seq_attn.checkpointing import (
    BestCheckpoint,
    LastCheckpoint,
    RNGState,
    read_checkpoint_hparams,
    with_safe_checkpoint_io,
)
from seq2seq_attn.data.datamodule import Seq2SeqDataModule, check_distributed_sampling
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.length_penalty import LengthPenaltySearch
from seq2seq_attn.lit_module import Seq2SeqLitModule
from seq2seq_attn.loggers import WandbConfig, finish_wandb, make_wandb_logger
from seq2seq_attn.trainer import Trainer
from seq2seq_attn.wandb_reports import WandbReports


def condense_error(message: str, valid_keys: list[str]) -> str:
    """Turn jsonargparse's nested, multi-line error into one line with a suggestion.

    ``Parser key "data": ... Parser key "task": Expected a Literal[...]`` becomes
    ``data.task: Expected a Literal[...]``; an unknown key gets the closest valid ones.
    """
    lines = [line.strip(" -") for line in message.strip().splitlines() if line.strip(" -")]
    unknown = re.search(
        r"unrecognized arguments: (?:--)?([\w.]+)|No action for key \"([\w.]+)\"|"
        r"does not accept option '([\w.]+)'|Option '([\w.]+)' is not accepted|unknown config key '([\w.]+)'",
        message,
    )
    if unknown:
        bad = next(g for g in unknown.groups() if g)
        parent = re.match(r'Parser key "([\w.]+)"', message.strip())
        if (unknown.group(4) or unknown.group(5)) and parent:  # an argument of a class chosen by class_path (data)
            bad = f"{parent.group(1)}.init_args.{bad}"
        close = difflib.get_close_matches(bad, valid_keys, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; run with --help for the valid keys"
        return f"unknown config key {bad!r}{hint}"
    union = re.search(r"Subtypes: \[(.*)\]", message)
    given = re.search(r"Given value: (.*)", message)
    if union and given and "Literal[" in union.group(1):
        literals = re.findall(r"Literal\[([^\]]*)\]", union.group(1))
        choices = [c.strip(" '\"") for group in literals for c in group.split(",")]
        keys = re.findall(r'[Kk]ey "([\w.]+)"', message)
        where = f"{keys[-1]}: " if keys else ""
        return f"{where}{given.group(1).strip()!r} is not one of: {', '.join(dict.fromkeys(choices))}"
    reasons = [
        line
        for line in lines
        if re.search(r"Expected a|Not of type|does not conform|not a valid|must be|Unable|not found", line)
        and "NoneType" not in line
    ]
    reason = reasons[0] if reasons else lines[0]
    keys = re.findall(r'[Kk]ey "([\w.]+)"', message)
    nested = re.match(r"([\w.]+): (.*)", reason)
    if nested:
        keys, reason = keys + [nested.group(1)], nested.group(2)
    path = ".".join(dict.fromkeys(keys))
    return f"{path}: {reason}" if path else reason


class Parser(LightningArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False  # a typo must not silently match a longer key
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Optional[Exception] = None):
        parser = getattr(ex, "subcommand_parser", None) or self
        keys = [o.lstrip("-") for o in parser._option_string_actions if o.startswith("--")]
        raise ConfigError(condense_error(message, keys + data_keys())) from ex


def data_keys() -> list[str]:
    """``data.init_args.<argument>`` of every data module (chosen by class_path, so not among the parser's keys)."""
    import inspect

    classes, keys = [Seq2SeqDataModule], set()
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        keys |= {f"data.init_args.{name}" for name in inspect.signature(cls.__init__).parameters if name != "self"}
    return sorted(keys)


class Seq2SeqCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(BestCheckpoint, "best_checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(LengthPenaltySearch, "length_penalty_search")
        parser.add_class_arguments(WandbConfig, "wandb", instantiate=False)
        parser.link_arguments("data.src_vocab_size", "model.src_vocab_size", apply_on="instantiate")
        parser.link_arguments("data.trg_vocab_size", "model.trg_vocab_size", apply_on="instantiate")

    def parse_arguments(self, parser, args) -> None:
        self.raw_args = [str(a) for a in (sys.argv[1:] if args is None else args)] if not isinstance(args, dict) else []
        super().parse_arguments(parser, args)

    def _parse_ckpt_path(self) -> None:
        """Build the model the checkpoint holds: its architecture wins over the configs.

        Lightning would replace every model setting with the checkpoint's; here only the
        architecture is taken from it, so test-time settings (beam, buckets) stay the
        user's, and an architecture flag on the command line that contradicts the
        checkpoint is an error rather than silently ignored.
        """
        subcommand = self.config.get("subcommand")
        ckpt = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt or not Path(ckpt).is_file():
            return
        saved = read_checkpoint_hparams(ckpt)
        for key in ARCHITECTURE_KEYS:
            if key not in saved or key.endswith("vocab_size"):
                continue
            given = self.config[f"{subcommand}.model.{key}"]
            if given != saved[key] and any(a.split("=")[0] == f"--model.{key}" for a in self.raw_args):
                raise ConfigError(
                    f"checkpoint has {key}={saved[key]!r} but --model.{key} says {given!r}: drop the flag "
                    "(the checkpoint's architecture is used) or train a new model"
                )
            self.config[f"{subcommand}.model.{key}"] = saved[key]

    def _instantiate_trainer(self, config, callbacks):
        if config.get("enable_checkpointing") is False:  # our default best/last checkpoints step aside
            self.trainer_defaults = {**self.trainer_defaults, "callbacks": []}
            callbacks = [c for c in callbacks if not isinstance(c, (BestCheckpoint, LastCheckpoint))]
        config["plugins"] = with_safe_checkpoint_io(config.get("plugins"))
        options = WandbConfig(**self._config()["wandb"])
        if options.enabled:
            config["logger"] = self._with_wandb(config, options)
            callbacks = [*callbacks, WandbReports(options.heatmaps, options.samples)]
        trainer = super()._instantiate_trainer(config, callbacks)
        check_distributed_sampling(trainer)  # here, before DDP spawns processes
        return trainer

    def _with_wandb(self, config, options: WandbConfig) -> list:
        """The configured logger(s) plus a W&B run that lives in the same run folder."""
        loggers = config.get("logger")
        loggers = [] if loggers in (None, False, True) else list(loggers) if isinstance(loggers, list) else [loggers]
        first = loggers[0] if loggers else None
        run_dir = Path(first.log_dir) if first is not None and first.log_dir else Path(config["default_root_dir"])
        name = f"{first.name}/{run_dir.name}" if first is not None and first.name else run_dir.name
        job_type = self.subcommand or "fit"  # run=False (ablation cells): fit, then test in the same run
        return [*loggers, make_wandb_logger(options, self._config().as_dict(), job_type, run_dir, name)]

    def _config(self):
        """This run's config (with ``run=False`` there is no subcommand level)."""
        return self.config[self.subcommand] if self.subcommand else self.config

    def before_instantiate_classes(self) -> None:
        ckpt = self.config.get(self.subcommand, {}).get("ckpt_path")
        if ckpt and ckpt not in ("best", "last", "hpc", "registry") and not Path(ckpt).is_file():
            raise ConfigError(
                f"checkpoint not found: {ckpt}: pass --ckpt_path RUN_DIR/checkpoints/best.ckpt "
                "(or last.ckpt) of a finished run"
            )


class ConfigCheck(Seq2SeqCLI):
    """Parses a configuration and builds its model and data module, but no Trainer (nothing is written):
    every mistake ``fit`` would report before training (a typo key, an impossible model) in a second."""

    def instantiate_trainer(self, **kwargs) -> None:
        """No Trainer, but its callbacks and plugins checked as ``fit`` checks them."""
        trainer = self._get(self.config_init, "trainer", default={})
        callbacks = trainer.get("callbacks") or []
        self.model.check_callbacks(callbacks if isinstance(callbacks, list) else [callbacks])
        with_safe_checkpoint_io(trainer.get("plugins"))
        return None

    def _set_seed(self) -> None:  # nothing runs: leave the process's random state (and the console) alone
        pass


def check_config(args: list[str]) -> None:
    """Raise the one-line :class:`ConfigError` that ``fit`` with these arguments would raise before training."""
    make_cli(args, run=False, cli_class=ConfigCheck)


def make_cli(args: Optional[list[str]] = None, run: bool = True, cli_class: type = Seq2SeqCLI) -> LightningCLI:
    """Construct the LightningCLI (``run=False`` only parses and instantiates)."""
    return cli_class(
        Seq2SeqLitModule,
        Seq2SeqDataModule,
        trainer_class=Trainer,
        subclass_mode_data=True,
        parser_class=Parser,
        args=args,
        run=run,
        seed_everything_default=1234,
        trainer_defaults={
            "callbacks": [RNGState()],
            "default_root_dir": "runs",
        },
        save_config_kwargs={"overwrite": True},
    )


def run_cli(args: Optional[list[str]] = None, run: bool = True) -> LightningCLI:
    """:func:`make_cli`, then close the W&B run a ``run=True`` command opened."""
    try:
        return make_cli(args, run)
    finally:
        if run:
            finish_wandb()
