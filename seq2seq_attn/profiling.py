"""Measuring speed: FLOP rates, this machine's GEMM rates, and the reference model the benchmarks share.

The reference model is the size of the peer comparison (``docs/measurements/peers.md``): embeddings 256,
bidirectional GRU 256 per direction, GRU decoder 512 (= 2 x 256, so ``dot`` fits too), dropout 0.2,
Adam 1e-3 built as the Lightning module builds it.
"""

import time
from typing import Callable

import torch

from seq2seq_attn.modules import Seq2Seq, build_seq2seq
from seq2seq_attn.optim import adam

REFERENCE_SIZES = {"emb_size": 256, "hidden_size": 256, "dec_hidden_size": 512, "dropout": 0.2}


def reference_model(src_vocab: int, trg_vocab: int, flow: str, attention: str, input_feed: bool) -> Seq2Seq:
    return build_seq2seq(src_vocab, trg_vocab, attention=attention, flow=flow, input_feed=input_feed, **REFERENCE_SIZES)


def reference_optimizer(model: torch.nn.Module) -> torch.optim.Adam:
    return adam(model.parameters(), lr=1e-3)


def flop_rate(run: Callable[[], object], flops: float, seconds: float = 1.5) -> float:
    """GFLOP/s of calling ``run()`` (``flops`` each) repeatedly for ``seconds``, after 3 warm-up calls."""
    for _ in range(3):
        run()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        runs += 1
    return flops * runs / (time.perf_counter() - start) / 1e9


def gemm_rate(dtype: torch.dtype, m: int, k: int, n: int, seconds: float = 1.5) -> float:
    """GFLOP/s of an (m x k) @ (k x n) matmul in ``dtype`` on this machine, now."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    return flop_rate(lambda: a @ b, 2 * m * k * n, seconds)
