"""The ``seq2seq-attn`` command.

LightningCLI subcommands (fit, validate, test, predict)::

    seq2seq-attn fit --config experiments/base.yaml --config experiments/toy/reverse.yaml \\
        --model.attention dot --model.flow luong --model.cell lstm

and the tools around them::

    seq2seq-attn ablate experiments/ablations/toy_reverse.yaml [--out DIR] [--jobs N]
    seq2seq-attn report DIR
    seq2seq-attn resume RUN_DIR            # continue a killed run from its last checkpoint
    seq2seq-attn translate --ckpt RUN.ckpt [--beam K] < source.txt > output.txt
    seq2seq-attn evaluate --ckpt RUN.ckpt --src FILE --ref FILE [--out results.json]
    seq2seq-attn data fetch multi30k
"""

import difflib
import re
import sys
import warnings
from pathlib import Path
from typing import Optional

from seq2seq_attn.errors import ConfigError


def _quiet() -> None:
    """Hide the warnings every run would print and nobody can act on."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="pytorch_lightning")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*skip_none parameter was deprecated.*")
    warnings.filterwarnings("ignore", message=".*not recommended to provide both args and command line.*")


def find_config_error(err: BaseException) -> Optional[ConfigError]:
    """The :class:`ConfigError` behind ``err`` (jsonargparse wraps ours in its own), if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def condense_error(message: str, valid_keys: list[str]) -> str:
    """Turn jsonargparse's nested, multi-line error into one line with a suggestion.

    ``Parser key "data": ... Parser key "task": Expected a Literal[...]`` becomes
    ``data.task: Expected a Literal[...]``; an unknown key gets the closest valid ones.
    """
    lines = [line.strip(" -") for line in message.strip().splitlines() if line.strip(" -")]
    unknown = re.search(
        r"unrecognized arguments: (?:--)?([\w.]+)|No action for key \"([\w.]+)\"|"
        r"does not accept option '([\w.]+)'",
        message,
    )
    if unknown:
        bad = next(g for g in unknown.groups() if g)
        close = difflib.get_close_matches(bad, valid_keys, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; run with --help for the valid keys"
        return f"unknown config key {bad!r}{hint}"
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


def build_cli(args: Optional[list[str]] = None, run: bool = True):
    """Construct the LightningCLI (``run=False`` only parses and instantiates)."""
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.cli import LightningArgumentParser, LightningCLI

    from seq2seq_attn.checkpointing import LastCheckpoint, RNGState
    from seq2seq_attn.data.datamodule import Seq2SeqDataModule
    from seq2seq_attn.inference import read_checkpoint_hparams
    from seq2seq_attn.lit_module import ARCHITECTURE_KEYS, Seq2SeqLitModule

    class Parser(LightningArgumentParser):
        def __init__(self, *args, **kwargs) -> None:
            kwargs["allow_abbrev"] = False  # a typo must not silently match a longer key
            super().__init__(*args, **kwargs)

        def error(self, message: str, ex: Optional[Exception] = None):
            parser = getattr(ex, "subcommand_parser", None) or self
            keys = [o.lstrip("-") for o in parser._option_string_actions if o.startswith("--")]
            raise ConfigError(condense_error(message, keys)) from ex

    class Seq2SeqCLI(LightningCLI):
        def add_arguments_to_parser(self, parser) -> None:
            parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
            parser.link_arguments("data.src_vocab_size", "model.src_vocab_size", apply_on="instantiate")
            parser.link_arguments("data.trg_vocab_size", "model.trg_vocab_size", apply_on="instantiate")

        def parse_arguments(self, parser, args) -> None:
            self.raw_args = (
                [str(a) for a in (sys.argv[1:] if args is None else args)] if not isinstance(args, dict) else []
            )
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
                callbacks = [c for c in callbacks if not isinstance(c, LastCheckpoint)]
            return super()._instantiate_trainer(config, callbacks)

        def before_instantiate_classes(self) -> None:
            ckpt = self.config.get(self.subcommand, {}).get("ckpt_path")
            if ckpt and ckpt not in ("best", "last", "hpc", "registry") and not Path(ckpt).is_file():
                raise ConfigError(
                    f"checkpoint not found: {ckpt}: pass --ckpt_path RUN_DIR/checkpoints/best.ckpt "
                    "(or last.ckpt) of a finished run"
                )

    checkpoints = ModelCheckpoint(monitor="val/loss", mode="min", filename="best", enable_version_counter=False)
    return Seq2SeqCLI(
        Seq2SeqLitModule,
        Seq2SeqDataModule,
        subclass_mode_data=True,
        parser_class=Parser,
        args=args,
        run=run,
        seed_everything_default=1234,
        trainer_defaults={
            "callbacks": [checkpoints, RNGState()],
            "plugins": [{"class_path": "seq2seq_attn.checkpointing.SafeCheckpointIO"}],
            "default_root_dir": "runs",
        },
        save_config_kwargs={"overwrite": True},
    )


def main(argv: Optional[list[str]] = None) -> None:
    from seq2seq_attn.commands import TOOL_COMMANDS

    _quiet()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in TOOL_COMMANDS:
            TOOL_COMMANDS[args[0]](args[1:])
            return
        commands = ["fit", "validate", "test", "predict", *TOOL_COMMANDS]
        if not args or (not args[0].startswith("-") and args[0] not in commands):
            given = f"unknown command {args[0]!r}" if args else "no command given"
            raise ConfigError(f"{given}: choose one of {commands} (seq2seq-attn COMMAND --help)")
        if args[:1] in (["-h"], ["--help"]):
            print(
                "tools: " + " | ".join(f"seq2seq-attn {name} ..." for name in TOOL_COMMANDS) + "   (each with --help)\n"
            )
        build_cli(argv)
    except Exception as err:
        user_error = find_config_error(err)
        if user_error is None:
            raise
        print(f"error: {user_error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
