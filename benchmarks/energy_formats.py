"""The additive energy of one target step in fp32 and bf16, eager and fused by ``torch.compile``.

    python benchmarks/energy_formats.py [--threads 2] [--batch 64] [--source 35] [--attn 512] [--seconds 2]

What :class:`seq2seq_attn.modules.scorers.TanhEnergy` computes per decoder step, on a (B, S, A) block:
forward ``e = tanh(q + k) v``, and the backward of its recomputed block (``tanh_backward`` of the outer
product with ``v``, the sums that give the query's and ``v``'s gradients). Eager is the package's code path;
compiled is the same formulas through Inductor with dynamic shapes, which fuses each into one loop. Prints
milliseconds per call and the ratios measured in this run, and the compile time.
"""

import argparse
import time

import torch

from seq2seq_attn.modules.scorers import TanhEnergy


class SavedFor:
    """The context that autograd passes to a Function: here the tensors are saved for the backward call."""

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors


def eager_forward(q, k, v):
    return TanhEnergy.forward(SavedFor(), q, k, v)  # (B, S): the package's forward


def eager_backward(q, k, v, grad):
    ctx = SavedFor()
    ctx.save_for_backward(q, k, v, None, None)
    return TanhEnergy.backward(ctx, grad)  # the package's backward: the block recomputed, then its gradients


def fused_forward(q, k, v):
    return (torch.tanh(q + k) * v).sum(-1)  # (B, S): one loop, no (B, S, A) block in memory


def fused_backward(q, k, v, grad):
    hidden = torch.tanh(q + k)
    grad_keys = (1 - hidden * hidden) * (grad.unsqueeze(-1) * v)
    return grad_keys.sum(1, keepdim=True), grad_keys, (grad.unsqueeze(-1) * hidden).sum((0, 1))


def per_call(fn, inputs: tuple, seconds: float) -> float:
    for _ in range(3):
        fn(*inputs)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(*inputs)
        calls += 1
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--source", type=int, default=35)
    parser.add_argument("--attn", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    forward, backward = torch.compile(fused_forward, dynamic=True), torch.compile(fused_backward, dynamic=True)
    print(f"{args.threads} threads, B={args.batch} S={args.source} A={args.attn}, ms per call")
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        q = torch.randn(args.batch, 1, args.attn, generator=g).to(dtype)
        k = torch.randn(args.batch, args.source, args.attn, generator=g).to(dtype)
        v, grad = torch.randn(args.attn, generator=g).to(dtype), torch.randn(args.batch, args.source).to(dtype)
        start = time.perf_counter()
        forward(q, k, v), backward(q, k, v, grad)
        compile_s = time.perf_counter() - start
        name = str(dtype).split(".")[-1]
        calls = {
            "eager forward": (eager_forward, (q, k, v)),
            "compiled forward": (forward, (q, k, v)),
            "eager backward": (eager_backward, (q, k, v, grad)),
            "compiled backward": (backward, (q, k, v, grad)),
        }
        for label, (fn, inputs) in calls.items():
            results[name, label] = per_call(fn, inputs, args.seconds)
        error = (forward(q, k, v).float() - eager_forward(q, k, v).float()).abs().max().item()
        print(f"{name}: compile {compile_s:.1f} s; compiled vs eager forward max |diff| {error:.3g}")
        for label in ("eager forward", "compiled forward", "eager backward", "compiled backward"):
            print(f"  {label:<18} {results[name, label]:8.3f}")
    for label in ("eager forward", "eager backward", "compiled forward", "compiled backward"):
        print(f"bf16 / fp32, {label}: {results['bfloat16', label] / results['float32', label]:.2f}x the time")
    for name in ("float32", "bfloat16"):
        eager = results[name, "eager forward"] + results[name, "eager backward"]
        fused = results[name, "compiled forward"] + results[name, "compiled backward"]
        print(f"{name}: forward + backward, compiled / eager: {fused / eager:.2f}x the time")


if __name__ == "__main__":
    main()
