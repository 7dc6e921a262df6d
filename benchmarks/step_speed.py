"""Training-step and decoding speed of every flow x scorer on the reference model size.

    python benchmarks/step_speed.py [--steps 5] [--threads N] [--quick] [--device cuda] [--bf16]

Random data: batch 64, source and target length 30, embeddings 256, bidirectional
GRU 256 per direction, decoder 512, vocabulary 8000. A training step is forward
+ backward + Adam. Decoding runs 30 output steps (EOS is suppressed by the length
cap a=1, b=0 on random weights, so every model decodes the same number of steps).
Prints one table, and the ratio of the parallel Luong path (input feeding off)
to the same model run step by step. Ratios are measured in this one run.
"""

import argparse
import os
import time

import torch

from seq2seq_attn.cpu import configure
from seq2seq_attn.data.collate import Batch
from seq2seq_attn.loss import token_loss
from seq2seq_attn.modules import SCORERS
from seq2seq_attn.profiling import reference_model, reference_optimizer
from seq2seq_attn.search import SearchSettings, beam_search, greedy_search

B, S, T, V = 64, 30, 30, 8000
DEVICE = torch.device("cpu")
BF16 = False  # autocast to bfloat16 (forward of training steps, and decoding)


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def autocast():
    return torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=BF16)


def variants() -> list[tuple[str, str, bool]]:
    rows = [("bahdanau", a, True) for a in sorted(SCORERS) if a not in ("dot", "scaled_dot")]
    rows += [("luong", a, feed) for feed in (True, False) for a in sorted(SCORERS)]
    return rows + [("none", "none", True)]


def build(flow: str, attention: str, feed: bool):
    torch.manual_seed(0)
    return reference_model(V, V, flow, attention, feed).to(DEVICE)


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (B, S), generator=g)
    lengths = torch.full((B,), S)
    trg_in = torch.randint(4, V, (B, T), generator=g)
    trg_out = torch.randint(4, V, (B, T), generator=g)
    return src.to(DEVICE), lengths.to(DEVICE), trg_in.to(DEVICE), trg_out.to(DEVICE)


def time_training(model, steps: int) -> float:
    src, lengths, trg_in, trg_out = batch()
    optimiser = reference_optimizer(model)
    model.train()

    train_batch = Batch(src, lengths, trg_in, trg_out, None, torch.arange(len(src), device=src.device))

    def step():
        with autocast():
            loss = token_loss(model, train_batch)  # the Lightning module's training loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    step()  # warm-up
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return steps / (time.perf_counter() - start)


def time_decoding(model, beam: int, repeats: int) -> float:
    src, lengths, _, _ = batch()
    model.eval()

    @torch.no_grad()
    def run():
        with autocast():
            return search_once()

    def search_once():
        if beam == 1:
            return greedy_search(model, src, lengths, SearchSettings(max_len_a=1.0, max_len_b=0))
        return beam_search(model, src, lengths, SearchSettings(beam_size=beam, max_len_a=1.0, max_len_b=0))

    run()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    sync()
    return repeats * B / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per model")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: cores)")
    parser.add_argument("--quick", action="store_true", help="one Bahdanau, one Luong pair and the baseline")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16")
    parser.add_argument("--decode-repeats", type=int, default=2, help="greedy passes (beam: half)")
    args = parser.parse_args()
    global DEVICE, BF16
    DEVICE, BF16 = torch.device(args.device), args.bf16
    torch.set_num_threads(args.threads)
    configure()
    rows = variants()
    if args.quick:
        rows = [
            ("bahdanau", "additive", True),
            ("luong", "general", True),
            ("luong", "general", False),
            ("none", "none", True),
        ]
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); batch {B}, S=T={S}, emb 256, "
        f"biGRU 256/dir, decoder 512, vocab {V}; device {DEVICE}{', bf16 autocast' if BF16 else ', fp32'}"
    )
    print(
        f"{'flow':<10}{'attention':<12}{'feed':<6}{'train steps/s':>14}{'tokens/s':>10}"
        f"{'greedy sent/s':>15}{'beam5 sent/s':>14}"
    )
    for flow, attention, feed in rows:
        model = build(flow, attention, feed)
        steps = time_training(model, args.steps)
        greedy = time_decoding(model, 1, args.decode_repeats)
        beam = time_decoding(model, 5, max(1, args.decode_repeats // 2))
        feed_text = "-" if flow != "luong" else ("on" if feed else "off")
        print(
            f"{flow:<10}{attention:<12}{feed_text:<6}{steps:>14.2f}{steps * B * T:>10.0f}{greedy:>15.1f}{beam:>14.1f}",
            flush=True,
        )
    print("\nparallel Luong path (input feeding off) vs the same model run step by step:")
    for attention in ["general"] if args.quick else sorted(SCORERS):
        model = build("luong", attention, False)
        parallel = time_training(model, args.steps)
        model.decoder.parallel = False  # the generic loop over decoder.step, one target step at a time
        stepwise = time_training(model, args.steps)
        print(
            f"  {attention:<12} parallel {parallel:6.2f} steps/s, step by step {stepwise:6.2f} steps/s: "
            f"{parallel / stepwise:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
