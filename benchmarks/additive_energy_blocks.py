"""Why the additive/concat energies are computed one target step at a time.

    python benchmarks/additive_energy_blocks.py [--threads N]

Times forward + backward of v^T tanh(q_t + k_s) for all T x S pairs at the reference
size (batch 64, T = S = 30, A = 512), as one (B, T, S, A) block and as T blocks of
(B, S, A) (what AdditiveScorer and ConcatScorer do), and prints the ratio measured in
this run.
"""

import argparse
import os
import time

import torch

B, T, S, A = 64, 30, 30, 512


def one_block(q, k, v):
    return v(torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))).squeeze(-1)  # (B, T, S)


def per_step(q, k, v):
    return torch.stack([v(torch.tanh(q[:, t].unsqueeze(1) + k)).squeeze(-1) for t in range(q.size(1))], 1)


def timed(fn, q, k, v, repeats: int) -> float:
    def run():
        out = fn(q, k, v)
        out.sum().backward()

    run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    q = torch.randn(B, T, A, requires_grad=True)
    k = torch.randn(B, S, A, requires_grad=True)
    v = torch.nn.Linear(A, 1, bias=False)
    torch.testing.assert_close(one_block(q, k, v), per_step(q, k, v))
    block = timed(one_block, q, k, v, args.repeats)
    step = timed(per_step, q, k, v, args.repeats)
    print(f"{args.threads} thread(s), B={B} T={T} S={S} A={A}, forward + backward:")
    print(f"  one (B,T,S,A) block: {block * 1000:7.1f} ms")
    print(f"  T blocks of (B,S,A): {step * 1000:7.1f} ms   ({block / step:.2f}x faster)")


if __name__ == "__main__":
    main()
