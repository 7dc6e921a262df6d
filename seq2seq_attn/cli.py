"""The ``seq2seq-attn`` command: the entry point that dispatches to the LightningCLI
(:mod:`seq2seq_attn.lightning_cli`) or a tool (:mod:`seq2seq_attn.tool_commands`).

LightningCLI subcommands (fit, validate, test, predict)::

    seq2seq-attn fit --config experiments/base.yaml --config experiments/toy/reverse.yaml \\
        --model.attention dot --model.flow luong --model.cell lstm

and the tools around them::

    seq2seq-attn ablate experiments/ablations/toy_reverse.yaml [--out DIR] [--jobs N]
    seq2seq-attn cell GRID --model.attention dot ...  # one cell of a grid (what a W&B sweep agent runs)
    seq2seq-attn report DIR
    seq2seq-attn resume RUN_DIR            # continue a killed run from its last checkpoint
    seq2seq-attn translate --ckpt RUN.ckpt [--beam K] < source.txt > output.txt
    seq2seq-attn evaluate --ckpt RUN.ckpt --src FILE --ref FILE [--out results.json]
    seq2seq-attn data fetch multi30k
    seq2seq-attn precision [--remeasure]   # GEMM rates here and what `precision: auto` picks

``seq2seq-attn --no-cpu-tuning COMMAND ...`` leaves the process's CPU settings alone
(see :mod:`seq2seq_attn.cpu`).
"""

import os
import sys
import warnings
from typing import Optional

from seq2seq_attn.errors import ConfigError, find_config_error


def _quiet() -> None:
    """Hide the warnings every run would print and nobody can act on."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="pytorch_lightning")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*skip_none parameter was deprecated.*")
    warnings.filterwarnings("ignore", message=".*not recommended to provide both args and command line.*")


def main(argv: Optional[list[str]] = None) -> None:
    from seq2seq_attn import cpu
    from seq2seq_attn.tool_commands import TOOL_COMMANDS

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--no-cpu-tuning"]:
        argv = args = args[1:]
        os.environ[cpu.OPT_OUT] = "0"  # inherited by ablation cells and DDP processes
    cpu.configure()  # CPU settings before any torch work: threads inherit them
    _quiet()
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
        from seq2seq_attn.lightning_cli import run_cli

        run_cli(argv)
    except Exception as err:
        user_error = find_config_error(err)
        if user_error is None:
            raise
        print(f"error: {user_error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
