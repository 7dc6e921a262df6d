"""Where a training step's time goes, per kind of op, in fp32 and bf16, on a study's real batches.

    S2S_DATA_ROOT=DIR python benchmarks/profile_step.py [--config experiments/base.yaml
        --config experiments/bible_en_es/base.yaml] [--models bahdanau/additive luong/general]
        [--precisions 32 bf16 bf16-compute] [--steps 60] [--warmup 20] [--profile 10] [--threads 2] [--json F]

Each (model, precision) runs in its own process (its own peak RSS and oneDNN caches): the model the configs
build (the Lightning module's loss, Adam, gradient clipping), ``--warmup`` updates, then ``--steps`` timed
updates (updates/s, target tokens/s), then ``--profile`` updates under ``torch.profiler`` whose self CPU
time is summed per op kind (matrix products, the RNN cells' gate arithmetic and other elementwise work,
softmax, the loss, dropout, casts, copies and indexing, the optimiser). Prints one table per model with the
share of the step each kind takes and the ratios against fp32 measured in this run; the machine's fp32 and
bf16 GEMM rates are measured in the same run. ``bf16`` is Lightning's ``bf16-mixed`` (autocast),
``bf16-compute`` is ``--trainer.precision bf16-compute`` (:func:`seq2seq_attn.precision.bf16_weights`).
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import defaultdict

import torch

# op kind by aten name, first match wins (self time: a wrapper such as aten::linear counts only its own part)
KINDS = [
    ("matrix products", r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|dot|mv|linear)$|mkldnn|onednn|_weight_"),
    # the loss's own softmax over (N, V) is an aten::_softmax like the attention's (B, T, S) one: counted here
    ("softmax (attention and loss)", r"softmax"),
    ("loss (besides its softmax)", r"SoftmaxCrossEntropy|cross_entropy|nll_loss|logsumexp|scatter_add"),
    ("dropout", r"dropout|bernoulli|Dropout|uniform_|^aten::rand"),
    ("optimiser", r"_foreach_|_fused_adam|adam|Adam|clip_grad|norm|_amp_foreach"),
    (
        "casts, copies, indexing, concatenation",
        r"^aten::(to|_to_copy)$|_autocast_to|copy_|cat|stack|index|"
        r"gather|select|slice|clone|contiguous|nonzero|unbind|split|"
        r"chunk|narrow|as_strided|expand|view|reshape|permute|transpose|"
        r"squeeze|unsqueeze|flatten|embedding",
    ),
    (
        "elementwise (gates, tanh, masks, sums)",
        r"add|sub|mul|div|sigmoid|tanh|relu|where|fill|masked_fill|sum|"
        r"mean|exp|log|neg|clamp|minimum|maximum|pow|sqrt|rsqrt|_backward",
    ),
    ("memory", r"empty|zeros|ones|full|resize_|zero_|new_"),
]


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, name)), "other")


def worker(configs: list[str], model_name: str, precision: str, steps: int, warmup: int, profile: int) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from seq2seq_attn.cpu import configure
    from seq2seq_attn.data.vocab import PAD_ID
    from seq2seq_attn.lightning_cli import make_cli
    from seq2seq_attn.loss import token_loss
    from seq2seq_attn.optim import adam
    from seq2seq_attn.precision import bf16_weights

    configure()
    sys.argv = sys.argv[:1]  # the configs go to the CLI as args; LightningCLI would also read the worker's flags
    flow, attention = model_name.split("/")
    args = [a for c in configs for a in ("--config", c)] + ["--model.flow", flow, "--model.attention", attention]
    cli = make_cli([*args, "--trainer.logger", "false"], run=False)
    cli.datamodule.setup("fit")
    module = cli.model.train()
    hp, clip = module.hparams, cli.trainer.gradient_clip_val or 0.0
    optimizer = adam(module.parameters(), hp.lr, hp.weight_decay)

    def number_format():
        if precision == "bf16-compute":
            return bf16_weights(module)
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def update(batch) -> None:
        with number_format():
            loss = token_loss(module.model, batch, hp.label_smoothing, hp.coverage_loss)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()

    batches = iter(cli.datamodule.train_dataloader())
    for _ in range(warmup):
        update(next(batches))
    tokens, start = 0, time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        update(batch)
        tokens += int((batch.trg_out != PAD_ID).sum())
    elapsed = time.perf_counter() - start
    train_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kinds: dict[str, float] = defaultdict(float)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(profile):
            update(next(batches))
    for event in prof.key_averages():
        kinds[kind_of(event.key)] += event.self_cpu_time_total / 1e6 / profile  # seconds per update
    return {"model": model_name, "precision": precision, "steps_per_s": steps / elapsed,
            "tok_per_s": tokens / elapsed, "train_peak_rss_mb": train_rss, "kinds": dict(kinds)}  # fmt: skip


def run_worker(args, model: str, precision: str) -> dict:
    configs = [a for c in args.config for a in ("--config", c)]
    command = [sys.executable, __file__, "--worker", model, precision, *configs]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--profile", str(args.profile)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, stdout=subprocess.PIPE, env=env, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_model(rows: list[dict]) -> None:
    base = next((r for r in rows if r["precision"] == "32"), rows[0])
    kinds = sorted({k for r in rows for k in r["kinds"]}, key=lambda k: -base["kinds"].get(k, 0.0))
    print(f"\n{rows[0]['model']}: milliseconds per update under the profiler (share of the profiled step)")
    print(f"{'op kind':<42}" + "".join(f"{r['precision']:>22}" for r in rows))
    for kind in kinds:
        cells = []
        for r in rows:
            total = sum(r["kinds"].values())
            value = r["kinds"].get(kind, 0.0)
            cells.append(f"{1000 * value:>12.1f} ({100 * value / total:>4.1f}%)")
        print(f"{kind:<42}" + "".join(f"{c:>22}" for c in cells))
    print(f"{'total (profiled)':<42}" + "".join(f"{1000 * sum(r['kinds'].values()):>22.1f}" for r in rows))
    print(f"{'updates/s (unprofiled)':<42}" + "".join(f"{r['steps_per_s']:>22.3f}" for r in rows))
    print(f"{'target tokens/s':<42}" + "".join(f"{r['tok_per_s']:>22.0f}" for r in rows))
    print(f"{'tokens/s vs fp32':<42}" + "".join(f"{r['tok_per_s'] / base['tok_per_s']:>21.2f}x" for r in rows))
    print(
        f"{'train peak RSS MB (vs fp32)':<42}"
        + "".join(
            f"{r['train_peak_rss_mb']:>14.0f} ({r['train_peak_rss_mb'] / base['train_peak_rss_mb']:.2f}x)" for r in rows
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", action="append", default=None)
    parser.add_argument("--models", nargs="+", default=["bahdanau/additive", "luong/general"])
    parser.add_argument("--precisions", nargs="+", default=["32", "bf16", "bf16-compute"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--profile", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.config = args.config or ["experiments/base.yaml", "experiments/bible_en_es/base.yaml"]
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.config, *args.worker, args.steps, args.warmup, args.profile)))
        return
    from seq2seq_attn.precision import cpu_description
    from seq2seq_attn.profiling import gemm_rate

    cpu, flags = cpu_description()
    rates = {name: gemm_rate(dtype, 2048, 2048, 2048) for name, dtype in (("fp32", torch.float32),
                                                                          ("bf16", torch.bfloat16))}  # fmt: skip
    print(f"{cpu} ({', '.join(flags) or 'no bf16/int8 flags'}), torch {torch.__version__}, {args.threads} threads")
    print(f"GEMM GFLOP/s (2048^3): fp32 {rates['fp32']:.0f}, bf16 {rates['bf16']:.0f} "
          f"({rates['bf16'] / rates['fp32']:.2f}x)")  # fmt: skip
    rows = []
    for model in args.models:
        part = [run_worker(args, model, precision) for precision in args.precisions]
        print_model(part)
        rows += part
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"gemm_gflops": rates, "cpu": cpu, "flags": flags, "rows": rows}, handle)


if __name__ == "__main__":
    main()
