"""Several averaging horizons from one training run: dev BLEU of each moving average at each validation update.

    # 1. train with the snapshots callback beside fast.yaml's average (a screen config: see below)
    # 2. score every snapshot on dev, as validation scores it:
    python benchmarks/average_horizon.py CELL SNAPSHOTS [--threads 2]

The weights' moving average (:class:`seq2seq_attn.averaging.ExponentialAverage`) leaves training untouched, so
averages of different horizons over one run differ only in what they average: one run can carry several.
:class:`AverageSnapshots` keeps one average per ``warmup`` (decay ``min(decay, (1 + n) / (warmup + n))`` at
update n; a larger ``warmup`` averages over a shorter tail, about the last ``1 / (warmup - 1)`` of training)
exactly as the validated average is kept (the same :func:`~seq2seq_attn.averaging.ema_update`, after every
update), and writes each average's weights every ``every`` updates to ``SNAPSHOTS/warmup<w>/step<n>.pt``. Put it
in a screen config beside ``fast.yaml``'s callbacks, with ``benchmarks/`` on ``PYTHONPATH``::

    trainer:
      callbacks:
        - class_path: pytorch_lightning.callbacks.EarlyStopping
          init_args: {monitor: val/bleu, mode: max, patience: 4}
        - class_path: seq2seq_attn.averaging.ExponentialAverage
          init_args: {decay: 0.999}
        - class_path: average_horizon.AverageSnapshots
          init_args: {warmups: [10, 20, 40, 80], every: 400, out: RUNS/average_horizon}

Afterwards this script loads each snapshot into the cell's model and validates it the way the trainer does (dev
split decoded greedily in the cell's precision, sacreBLEU), and prints dev BLEU per update and warmup beside the
cell's own validations (``val_history.jsonl``). The validated average's warmup, given again to the callback,
must repeat those to the last digit: that is the check that the snapshots are the averages validation sees.
"""

import argparse
import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import yaml
from torch.optim.swa_utils import AveragedModel

from seq2seq_attn.ablation.length_study import read_history
from seq2seq_attn.averaging import ema_update
from seq2seq_attn.cpu import configure
from seq2seq_attn.inference import load_model
from seq2seq_attn.metrics import text_score_table
from seq2seq_attn.precision import cpu_description
from seq2seq_attn.search import SearchSettings, search


class AverageSnapshots(pl.Callback):
    """One moving average of the weights per ``warmup``, each written every ``every`` updates (see the module
    docstring). Validation, early stopping and checkpoints never see them."""

    def __init__(self, warmups: list[float], every: int = 400, decay: float = 0.999, out: str = "average_snapshots"):
        self.warmups, self.every, self.decay, self.out = [float(w) for w in warmups], every, decay, Path(out)
        self.averages: dict[float, AveragedModel] = {}
        self.latest = 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":  # as WeightAveraging builds its average: weights only, the buffers are constants
            self.averages = {
                w: AveragedModel(pl_module, use_buffers=False, multi_avg_fn=ema_update(self.decay, w))
                for w in self.warmups
            }

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if step <= self.latest:
            return
        self.latest = step
        for w, average in self.averages.items():
            average.update_parameters(pl_module)  # the raw weights: a validation swaps the average in only later
            if step % self.every == 0:
                folder = self.out / f"warmup{w:g}"
                folder.mkdir(parents=True, exist_ok=True)
                torch.save(average.module.state_dict(), folder / f"step{step}.pt")

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        raise SystemExit("AverageSnapshots cannot resume (its averages are not checkpointed): start the screen again")


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
    parser.add_argument("cell", type=Path, help="the screen's cell folder (config.yaml, checkpoints/last.ckpt)")
    parser.add_argument("snapshots", type=Path, help="AverageSnapshots' out folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the dev BLEU table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    configure()
    found = snapshots(args.snapshots)
    config = yaml.safe_load((args.cell / "config.yaml").read_text(encoding="utf-8"))
    chosen = args.cell / "precision.json"  # what `precision: auto` chose; else the config's own
    precision = str(json.loads(chosen.read_text(encoding="utf-8"))["precision"] if chosen.is_file()
                    else config["trainer"].get("precision") or "32-true")  # fmt: skip
    checkpoints = sorted((args.cell / "checkpoints").glob("*.ckpt"))
    if not checkpoints:
        raise SystemExit(f"{args.cell}/checkpoints: no checkpoint to read the model's shape and vocabularies from")
    module = load_model(checkpoints[0])
    module_name, _, class_name = config["data"]["class_path"].rpartition(".")
    data = getattr(importlib.import_module(module_name), class_name)(**config["data"]["init_args"])
    data.setup("validate")
    batches = list(data.val_dataloader())
    hp, edges = module.hparams, list(config["model"]["test_buckets"])
    settings = SearchSettings(1, hp.alpha, hp.max_len_a, hp.max_len_b)
    cpu, flags = cpu_description()
    print(f"{cpu} ({', '.join(flags) or 'no bf16 instructions'}), {args.threads} threads, {precision}")

    def dev_bleu(weights: Path) -> float:
        module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        texts = {}
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision.startswith("bf16")):
            for batch in batches:
                hyp = search(module.model, batch.src, batch.src_lengths, settings)
                for i, ids in zip(batch.index.tolist(), hyp.to_lists()):
                    texts[i] = module.trg_vocab.to_text(ids, data.detokenize)
        order = sorted(texts)
        refs = [data.reference("val", i) for i in order]
        lengths = [data.source_length("val", i) for i in order]
        return text_score_table([texts[i] for i in order], refs, lengths, edges)[0]["bleu"]

    validated = {r["step"]: r["overall"]["bleu"] for r in read_history(args.cell) if "bleu" in r.get("overall", {})}
    warmups = sorted(found)
    steps = sorted({s for by_step in found.values() for s in by_step})
    scores = {w: {s: dev_bleu(found[w][s]) for s in steps if s in found[w]} for w in warmups}
    header = ["update", "validated"] + [f"warmup {w:g}" for w in warmups]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for s in steps:
        cells = [f"{s:,}", f"{validated[s]:.2f}" if s in validated else "-"]
        cells += [f"{scores[w][s]:.2f}" if s in scores[w] else "-" for w in warmups]
        print("| " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps({f"{w:g}": scores[w] for w in warmups}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
