"""Training and decoding speed of the shared Multi30k model, peak RSS, GEMM rates and utilisation.

    python benchmarks/throughput.py [--variants quick|all] [--precisions 32 bf16 bf16-compute] [--steps 320]
        [--json FILE]

The shared model of the peer comparison (docs/measurements/peers.md): Multi30k de->en, word vocabularies of up to
8000 per side (min frequency 2), embeddings 256, biGRU 256 per direction, GRU decoder 512,
dropout 0.2, Adam 1e-3, gradient-norm clip 5, 64 sentences per batch, 2 threads, CPU.

Precisions: ``32`` (fp32), ``bf16`` (autocast, what Lightning's ``bf16-mixed`` does) and
``bf16-compute`` (``seq2seq_attn.precision.bf16_weights``: the weights cast to bf16 once per update,
fp32 master weights; what ``--trainer.precision bf16-compute`` does). Decoding runs in the same format.

Each (flow, scorer, precision) trains in its own process for ``--steps`` updates on real,
length-bucketed Multi30k batches; the rate is measured over updates ``warmup+1 .. steps``
(21-320, as the peer harness does), then the process decodes test_2016_flickr (1000
sentences) greedily and with beam 5. Peak RSS is the process's maximum resident set.
Training FLOPs per update are counted with torch's FlopCounterMode on real batches, and
the achieved model FLOP rate is reported as a share of the fp32 and bf16 GEMM rates that
this same run measures. "tok/s" counts real target tokens (with EOS, without padding);
"norm tok/s" is sentences/s x the harness's mean target length (its lowercase regex
tokenisation), the number the peer harness reports, so the two compare directly.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from seq2seq_attn.profiling import gemm_rate

# (flow, scorer, input feeding); "peers": the models the peer comparison needs
PEERS = [("luong", "general", True), ("luong", "additive", True), ("luong", "general", False)]
QUICK = [("bahdanau", "additive", True), *PEERS]
VARIANTS = {
    "peers": PEERS,
    "quick": QUICK,
    "all": QUICK
    + [
        ("bahdanau", "general", True),
        ("luong", "dot", True),
        ("luong", "concat", True),
        ("luong", "dot", False),
        ("none", "none", True),
    ],
}


def harness_mean_target_length(data_root: Path) -> float:
    """Mean target length of train.en as the peer harness counts it (lowercase regex tokens + EOS)."""
    import gzip

    pattern = re.compile(r"\w+|[^\w\s]")
    with gzip.open(data_root / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as handle:
        lengths = [len(pattern.findall(line.strip().lower())) + 1 for line in handle]
    return sum(lengths) / len(lengths)


def worker(flow: str, attention: str, feed: bool, precision: str, steps: int, warmup: int, decode: bool) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    from seq2seq_attn.cpu import configure
    from seq2seq_attn.data.parallel import ParallelDataModule
    from seq2seq_attn.data.vocab import PAD_ID
    from seq2seq_attn.loss import token_loss
    from seq2seq_attn.precision import bf16_weights
    from seq2seq_attn.profiling import reference_model, reference_optimizer
    from seq2seq_attn.search import SearchSettings, search

    configure()  # what the seq2seq-attn command and the Lightning module do
    torch.manual_seed(42)
    data = ParallelDataModule(corpus="multi30k", tokenizer="word", vocab_size=8000, min_freq=2, max_length=100)
    data.setup("fit")
    model = reference_model(data.src_vocab_size, data.trg_vocab_size, flow, attention, feed)
    optimizer = reference_optimizer(model)

    def number_format():
        if precision == "bf16-compute":
            return bf16_weights(model)  # what --trainer.precision bf16-compute does
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")  # Lightning's bf16-mixed

    def update(batch) -> None:
        with number_format():
            loss = token_loss(model, batch)  # the Lightning module's training loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    model.train()
    batches, tokens, sentences, flops = iter(data.train_dataloader()), 0, 0, []
    for step in range(1, steps + 1):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(data.train_dataloader())
            batch = next(batches)
        if step == warmup + 1:
            start = time.perf_counter()
        if step in (warmup // 2, warmup // 2 + 1, warmup // 2 + 2):  # FLOPs of real updates, outside the window
            with FlopCounterMode(display=False) as counter:
                update(batch)
            flops.append((counter.get_total_flops(), int((batch.trg_out != PAD_ID).sum())))
            continue
        update(batch)
        if step > warmup:
            tokens += int((batch.trg_out != PAD_ID).sum())
            sentences += len(batch)
    elapsed = time.perf_counter() - start
    flops_per_token = sum(f for f, _ in flops) / sum(t for _, t in flops)
    result = {
        "flow": flow,
        "attention": attention,
        "input_feed": feed if flow == "luong" else None,
        "precision": precision,
        "steps_per_s": (steps - warmup) / elapsed,
        "sents_per_s": sentences / elapsed,
        "tok_per_s": tokens / elapsed,
        "flops_per_token": flops_per_token,
    }
    result["train_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before decoding
    if decode:
        model.eval()
        data.setup("test")
        test = list(data.loader("test"))
        for beam, key in ((1, "greedy_sents_per_s"), (5, "beam5_sents_per_s")):
            with torch.no_grad(), number_format():
                begin, n = time.perf_counter(), 0
                for batch in test:
                    search(model, batch.src, batch.src_lengths, SearchSettings(beam, 0.6, 1.5, 10))
                    n += len(batch)
                result[key] = n / (time.perf_counter() - begin)
    return result


def run_worker(args: argparse.Namespace, flow: str, attention: str, feed: bool, precision: str) -> dict:
    command = [sys.executable, __file__, "--worker", flow, attention, str(feed), precision]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    command += [] if args.no_decode else ["--decode"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"worker {flow}/{attention}/{precision} failed (status {status})")
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", choices=sorted(VARIANTS), default="quick")
    parser.add_argument("--precisions", nargs="+", default=["32", "bf16"], choices=["32", "bf16", "bf16-compute"])
    parser.add_argument("--steps", type=int, default=320)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-decode", action="store_true", help="skip the decoding measurement")
    parser.add_argument("--decode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        flow, attention, feed, precision = args.worker
        row = worker(flow, attention, feed == "True", precision, args.steps, args.warmup, args.decode)
        print(json.dumps(row))
        return

    from seq2seq_attn.data.corpora import data_root

    mean_len = harness_mean_target_length(data_root(None))
    rates = {
        "fp32_2048": gemm_rate(torch.float32, 2048, 2048, 2048),
        "bf16_2048": gemm_rate(torch.bfloat16, 2048, 2048, 2048),
        "fp32_out": gemm_rate(torch.float32, 896, 512, 8000),
        "bf16_out": gemm_rate(torch.bfloat16, 896, 512, 8000),
    }
    print(
        f"torch {torch.__version__}, {args.threads} threads; GEMM GFLOP/s: fp32 {rates['fp32_2048']:.0f} "
        f"(2048^2), {rates['fp32_out']:.0f} (896x512x8000); bf16 {rates['bf16_2048']:.0f}, {rates['bf16_out']:.0f}"
    )
    print(f"harness mean target length (train.en, lowercase regex tokens + EOS): {mean_len:.2f}")
    header = (
        f"{'flow':<9}{'attention':<10}{'feed':<5}{'prec':<13}{'upd/s':>7}{'tok/s':>8}{'norm tok/s':>11}"
        f"{'MFLOP/tok':>10}{'%fp32':>7}{'%bf16':>7}{'greedy/s':>9}{'beam5/s':>8}{'RSS MB':>8}{'train RSS':>10}"
    )
    print(header)
    rows = []
    variants = VARIANTS[args.variants]
    for flow, attention, feed in variants:
        for precision in args.precisions:
            row = run_worker(args, flow, attention, feed, precision)
            row["norm_tok_per_s"] = row["sents_per_s"] * mean_len
            achieved = row["flops_per_token"] * row["tok_per_s"] / 1e9
            row["share_fp32_gemm"] = achieved / rates["fp32_2048"]
            row["share_bf16_gemm"] = achieved / rates["bf16_2048"]
            rows.append(row)
            feed_text = "-" if flow != "luong" else ("on" if feed else "off")
            print(
                f"{flow:<9}{attention:<10}{feed_text:<5}{precision:<13}{row['steps_per_s']:>7.2f}"
                f"{row['tok_per_s']:>8.0f}{row['norm_tok_per_s']:>11.0f}{row['flops_per_token'] / 1e6:>10.1f}"
                f"{100 * row['share_fp32_gemm']:>6.0f}%{100 * row['share_bf16_gemm']:>6.0f}%"
                f"{row.get('greedy_sents_per_s', float('nan')):>9.1f}{row.get('beam5_sents_per_s', float('nan')):>8.1f}"
                f"{row['peak_rss_mb']:>8.0f}{row['train_peak_rss_mb']:>10.0f}",
                flush=True,
            )
    ratios = []
    for row in rows:
        key = (row["flow"], row["attention"], row["input_feed"])
        same = [b for b in rows if b["precision"] == "32" and (b["flow"], b["attention"], b["input_feed"]) == key]
        base = same[0] if same else None
        if row is base or base is None:
            continue
        text = f"  {'/'.join(str(k) for k in key)} {row['precision']}: "
        text += f"tok/s {row['tok_per_s'] / base['tok_per_s']:.2f}x"
        text += f", train RSS {row['train_peak_rss_mb'] / base['train_peak_rss_mb']:.2f}x"
        for name, label in (("greedy_sents_per_s", "greedy"), ("beam5_sents_per_s", "beam 5")):
            if name in row:
                text += f", {label} {row[name] / base[name]:.2f}x"
        ratios.append(text)
    if ratios:
        print("against fp32 in this run:", *ratios, sep="\n")
    if args.json:
        policy = os.environ.get("OMP_WAIT_POLICY") or "default"  # peer_ratios.py compares like with like
        record = {"gemm_gflops": rates, "mean_target_length": mean_len, "omp_wait_policy": policy, "rows": rows}
        Path(args.json).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
