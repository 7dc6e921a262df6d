"""A training update with the decoder step eager and compiled by ``torch.compile``, in fp32 and bf16.

    python benchmarks/compiled_step.py [--models luong/general/feed bahdanau/additive] [--updates 10] [--threads 2]

The Bible study's model (embeddings 256, biGRU 256 per direction, GRU decoder 512, 8k vocabularies) on
batches of 64 random pairs whose lengths cycle through 30-38 tokens (a new source length nearly every
batch, as length-bucketed batches bring). Teacher forcing calls ``decoder.step`` once per target token;
compiled, each call is one Inductor graph (dynamic shapes) whose elementwise work (GRU gates, softmax,
masks, tanh, concatenations) is fused into loops, and its backward too. bf16 is autocast (what
``--trainer.precision bf16-mixed`` does). Each (precision, mode) runs in its own process: the time of the
first three updates (the compile), then milliseconds per update over ``--updates`` more, and the ratios
of this one run.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch

LENGTHS = (30, 34, 38, 32, 36)


def worker(model_name: str, compiled: bool, precision: str, updates: int) -> dict:
    from seq2seq_attn.cpu import configure
    from seq2seq_attn.loss import cross_entropy
    from seq2seq_attn.profiling import reference_model

    configure()
    torch.manual_seed(0)
    flow, attention, *feed = model_name.split("/")
    model = reference_model(8000, 8000, flow, attention, bool(feed)).train()
    if compiled:
        model.decoder.step = torch.compile(model.decoder.step, dynamic=True)

    def update(length: int) -> None:
        src, trg = torch.randint(4, 8000, (64, length)), torch.randint(4, 8000, (64, length + 1))  # (B, S), (B, T+1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(src, torch.full((64,), length), trg[:, :-1])  # logits (B, T, V)
            loss = cross_entropy(out.logits.flatten(0, 1), trg[:, 1:].flatten())
        loss.backward()

    start = time.perf_counter()
    for length in LENGTHS[:3]:
        update(length)
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(updates):
        update(LENGTHS[i % len(LENGTHS)])
    return {"warmup_s": warmup, "ms_per_update": (time.perf_counter() - start) / updates * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["luong/general/feed", "bahdanau/additive"])
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", nargs=3, metavar=("MODEL", "MODE", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        model, mode, precision = args.worker
        print(json.dumps(worker(model, mode == "compiled", precision, args.updates)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    print(f"{args.threads} threads, torch {torch.__version__}; ms per update (first 3 updates, with the compile)")
    for model in args.models:
        times = {}
        for precision in ("fp32", "bf16"):
            for mode in ("eager", "compiled"):
                command = [sys.executable, __file__, "--worker", model, mode, precision]
                command += ["--updates", str(args.updates), "--threads", str(args.threads)]
                result = json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True
                                                   ).stdout.strip().splitlines()[-1])  # fmt: skip
                times[precision, mode] = result["ms_per_update"]
                ms, warmup = result["ms_per_update"], result["warmup_s"]
                print(f"{model:<20} {precision:<5} {mode:<9} {ms:7.0f}  ({warmup:.1f} s)")
        for precision in ("fp32", "bf16"):
            ratio = times[precision, "eager"] / times[precision, "compiled"]
            print(f"{model:<20} {precision}: compiled runs at {ratio:.2f}x eager's speed")
        print(f"{model:<20} bf16 eager {times['fp32', 'eager'] / times['bf16', 'eager']:.2f}x fp32 eager's speed")


if __name__ == "__main__":
    main()
