"""Several averaging horizons from one training run: dev BLEU of each moving average at each validation update.

    S2S_DATA_ROOT=DIR S2S_RUNS_ROOT=RUNS seq2seq-attn ablate \
        experiments/ablations/bible_average_horizon.yaml --jobs 1
    python benchmarks/average_horizon.py RUNS/ablations/bible_average_horizon/cells/CELL [--out FILE.json]

The weights' moving average (:class:`seq2seq_attn.averaging.ExponentialAverage`) leaves training untouched, so
averages of different horizons over one run differ only in what they average: one run can carry several.
:class:`seq2seq_attn.averaging.AverageSnapshots` keeps one average per ``warmup`` (decay
``min(decay, (1 + n) / (warmup + n))`` at update n; a larger ``warmup`` averages over a shorter tail, about the
last ``1 / (warmup - 1)`` of training) exactly as the validated average is kept (the same
:func:`~seq2seq_attn.averaging.ema_update`, after every update), and writes each average's weights every
``every`` updates to ``average_snapshots/warmup<w>/step<n>.pt`` in the run folder.
``experiments/bible_en_es/average_horizon.yaml`` puts it beside ``fast.yaml``'s callbacks::

    trainer:
      callbacks:
        - class_path: pytorch_lightning.callbacks.EarlyStopping
          init_args: {monitor: val/bleu, mode: max, patience: 4}
        - class_path: seq2seq_attn.averaging.ExponentialAverage
          init_args: {decay: 0.999}
        - class_path: seq2seq_attn.averaging.AverageSnapshots
          init_args: {warmups: [10, 20, 40, 80], every: 400}

Afterwards this script loads each snapshot into the cell's model and runs the trainer's own validation on it,
built from the cell's ``config.yaml`` (the same data, precision, decode limit and greedy search), and prints dev
BLEU per update and warmup beside the cell's own validations (``val_history.jsonl``); ``--out`` writes both as
JSON. The validated average's warmup, carried again by the callback, must repeat the cell's validations to the
last digit: that is the check that the snapshots are the averages validation sees.
"""

import argparse
import json
import re
import tempfile
from pathlib import Path

import torch
import yaml

from seq2seq_attn.ablation.length_study import read_history
from seq2seq_attn.averaging import SNAPSHOTS
from seq2seq_attn.lightning_cli import make_cli
from seq2seq_attn.precision import cpu_description


def snapshots(folder: Path) -> dict[float, dict[int, Path]]:
    """``{warmup: {update: file}}`` of a snapshots folder."""
    found: dict[float, dict[int, Path]] = {}
    for path in sorted(folder.glob("warmup*/step*.pt")):
        warmup = float(path.parent.name.removeprefix("warmup"))
        found.setdefault(warmup, {})[int(re.fullmatch(r"step(\d+)\.pt", path.name).group(1))] = path
    if not found:
        raise SystemExit(f"{folder}: no warmup*/step*.pt snapshots: train with AverageSnapshots first")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", type=Path, help="the screen's cell folder (config.yaml, average_snapshots/)")
    parser.add_argument("--out", type=Path, help="write the dev BLEU per warmup and update as JSON here")
    args = parser.parse_args()
    found = snapshots(args.cell / SNAPSHOTS)
    with tempfile.TemporaryDirectory() as scratch:  # the validations' own val_history.jsonl, not the cell's
        # the cell's own config, trainer and data: validation runs as in training (precision, decode limit, threads)
        config = yaml.safe_load((args.cell / "config.yaml").read_text(encoding="utf-8"))
        for key in ("ckpt_path", "weights_only"):  # the fit command's own keys, which a parser without one refuses
            config.pop(key, None)
        (Path(scratch) / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        cli = make_cli(["--config", str(Path(scratch) / "config.yaml"), "--trainer.logger", "false",
                        "--trainer.callbacks", "[]", "--trainer.enable_progress_bar", "false",
                        "--trainer.default_root_dir", scratch], run=False)  # fmt: skip
        cpu, flags = cpu_description()
        print(f"{cpu} ({', '.join(flags) or 'no bf16 instructions'}), {torch.get_num_threads()} threads, "
              f"precision {cli.trainer.precision}")  # fmt: skip

        def dev_bleu(weights: Path) -> float:
            cli.model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            cli.trainer.validate(cli.model, datamodule=cli.datamodule, verbose=False)
            return read_history(Path(scratch))[-1]["overall"]["bleu"]  # the exact score, not the logged float32

        warmups = sorted(found)
        steps = sorted({s for by_step in found.values() for s in by_step})
        scores = {w: {s: dev_bleu(found[w][s]) for s in steps if s in found[w]} for w in warmups}
    validated = {r["step"]: r["overall"]["bleu"] for r in read_history(args.cell) if "bleu" in r.get("overall", {})}
    header = ["update", "validated"] + [f"warmup {w:g}" for w in warmups]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for s in steps:
        cells = [f"{s:,}", f"{validated[s]:.2f}" if s in validated else "-"]
        cells += [f"{scores[w][s]:.2f}" if s in scores[w] else "-" for w in warmups]
        print("| " + " | ".join(cells) + " |")
    if args.out:
        table = {"validated": {s: validated[s] for s in steps if s in validated}}
        table |= {f"warmup {w:g}": scores[w] for w in warmups}
        args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
