"""Training speed of the models of a study, built from its own configs, on its real batches.

    python benchmarks/config_speed.py --config experiments/base.yaml --config experiments/bible_en_es/base.yaml \\
        --models none/none bahdanau/additive luong/general luong/dot [--steps 40] [--threads 2]

Prints updates per second for each flow/attention (after 5 warm-up updates, with the Lightning
module's loss and optimiser, gradient clipping as configured) and the updates that fit in a given
number of minutes: what sets a study's step budget so that every cell fits its time.
"""

import argparse
import time

import torch

from seq2seq_attn.cpu import configure
from seq2seq_attn.lightning_cli import make_cli
from seq2seq_attn.loss import token_loss


def updates_per_second(configs: list[str], flow: str, attention: str, steps: int) -> float:
    args = [a for c in configs for a in ("--config", c)] + ["--model.flow", flow, "--model.attention", attention]
    cli = make_cli([*args, "--trainer.logger", "false"], run=False)
    cli.datamodule.setup("fit")
    module = cli.model.train()
    optimizer = module.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    clip = cli.trainer.gradient_clip_val
    batches = iter(cli.datamodule.train_dataloader())
    for step in range(steps + 5):
        if step == 5:
            start = time.perf_counter()
        loss = token_loss(module.model, next(batches), module.hparams.label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--models", nargs="+", default=["none/none", "bahdanau/additive", "luong/general"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=24.0, help="the training budget per cell")
    args = parser.parse_args()
    configure()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} timed updates per model")
    for model in args.models:
        flow, attention = model.split("/")
        rate = updates_per_second(args.config, flow, attention, args.steps)
        budget = int(rate * 60 * args.minutes)
        print(f"{flow:>9} {attention:>9}: {rate:.2f} updates/s, {budget} in {args.minutes:g} min")


if __name__ == "__main__":
    main()
