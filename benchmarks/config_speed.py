"""Training speed of the models of a study, built from its own configs, on its real batches.

    python benchmarks/config_speed.py --config experiments/base.yaml --config experiments/bible_en_es/base.yaml \\
        --models none/none bahdanau/additive luong/general luong/dot [--steps 40] [--threads 2]

Prints updates and target tokens per second for each flow/attention (after 5 warm-up updates, with the
Lightning module's loss and optimiser, gradient clipping as configured) and the updates that fit in a
given number of minutes: what sets a study's step budget so that every cell fits its time. A model given
as a YAML file (e.g. experiments/multi30k_de_en/transformer.yaml) is that file on top of the configs,
so the Transformer reference is measured on the same batches as the RNN models:

    python benchmarks/config_speed.py --config experiments/base.yaml --config experiments/multi30k_de_en/base.yaml \\
        --models bahdanau/additive luong/general experiments/multi30k_de_en/transformer.yaml
"""

import argparse
import time

import torch

from seq2seq_attn.cpu import configure
from seq2seq_attn.data.vocab import PAD_ID
from seq2seq_attn.lightning_cli import make_cli
from seq2seq_attn.loss import token_loss
from seq2seq_attn.optim import adam


def training_speed(configs: list[str], model: str, steps: int) -> tuple[float, float]:
    """(updates/s, target tokens/s) of ``model``: "flow/attention" or a YAML file of model settings."""
    args = [a for c in configs for a in ("--config", c)]
    if model.endswith((".yaml", ".yml")):
        args += ["--config", model]
    else:
        flow, attention = model.split("/")
        args += ["--model.flow", flow, "--model.attention", attention]
    cli = make_cli([*args, "--trainer.logger", "false"], run=False)
    cli.datamodule.setup("fit")
    module = cli.model.train()
    # the optimiser the module builds (its lr schedule, left out, does not change the speed)
    optimizer = adam(module.parameters(), module.hparams.lr, module.hparams.weight_decay)
    clip = cli.trainer.gradient_clip_val
    batches = iter(cli.datamodule.train_dataloader())
    tokens = 0
    for step in range(steps + 5):
        if step == 5:
            start = time.perf_counter()
        batch = next(batches)
        tokens += int((batch.trg_out != PAD_ID).sum()) if step >= 5 else 0
        loss = token_loss(module.model, batch, module.hparams.label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()
    elapsed = time.perf_counter() - start
    return steps / elapsed, tokens / elapsed


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
        rate, tokens = training_speed(args.config, model, args.steps)
        budget = int(rate * 60 * args.minutes)
        name = model if model.endswith((".yaml", ".yml")) else " ".join(f"{part:>9}" for part in model.split("/"))
        print(f"{name}: {rate:.2f} updates/s, {tokens:.0f} target tokens/s, {budget} in {args.minutes:g} min")


if __name__ == "__main__":
    main()
