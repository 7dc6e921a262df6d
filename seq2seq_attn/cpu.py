"""Process-wide floating-point setting for speed: flush denormal numbers to zero.

Attention makes denormals (magnitudes below 1.2e-38): softmax weights of far-off
source words underflow into that range, and the backward pass spreads them into
the gradients of the keys, the encoder and the projections. On x86 CPUs every
arithmetic operation on a denormal takes a slow microcode path: a 2048² fp32
matrix product with denormal inputs took 11.9 s instead of 0.05 s on the 2-core
development machine, and Luong general attention trained 40% faster with
denormals flushed (``benchmarks/throughput.py``). Flushing (the CPU's FTZ and
DAZ modes, ``torch.set_flush_denormal``) turns those values into 0, a change of
at most 1.2e-38 per value.

The mode belongs to each thread, and threads inherit it when they are created.
torch's OpenMP thread pool (shared by the BLAS) starts with the first parallel
operation, so the ``seq2seq-attn`` command and an ablation cell set the mode first
thing, and the Lightning module sets it when it is built. If the pool already
runs (in a notebook, say), :func:`flush_denormals` sets the mode inside every
pool thread through the OpenMP runtime, and warns once if even that fails.
"""

import ctypes
import warnings

import torch

_warned = False


def flush_denormals() -> bool:
    """Flush denormals to zero in this process; returns whether every pool thread does.

    Returns False where the CPU has no such mode (not x86: there denormals are not slow).
    """
    global _warned
    if not torch.set_flush_denormal(True):
        return False
    if _pool_flushes():
        return True
    _set_in_openmp_threads()
    if _pool_flushes():
        return True
    if not _warned:
        warnings.warn(
            "denormal numbers are flushed on the main thread only (parallel torch work ran before "
            "seq2seq_attn could set the mode): training can run up to 40% slower; call "
            "seq2seq_attn.cpu.flush_denormals() before any other torch work (the seq2seq-attn command does)",
            stacklevel=2,
        )
        _warned = True
    return False


def denormal_matrix(rows: int, cols: int) -> torch.Tensor:
    """``(rows, cols)`` fp32 filled with the largest denormal, 1.18e-38, written as bits: a literal
    such as ``torch.full(..., 1e-39)`` would itself be flushed to 0 once the mode is on."""
    return torch.full((rows, cols), 0x007FFFFF, dtype=torch.int32).view(torch.float32)


def _pool_flushes() -> bool:
    """A product of denormal inputs is exactly 0 only if every thread that computes a block flushes."""
    return int((denormal_matrix(64, 512) @ torch.ones(512, 512)).count_nonzero()) == 0


def _set_in_openmp_threads() -> None:
    """Run ``torch.set_flush_denormal(True)`` once in each thread of torch's OpenMP team.

    ``GOMP_parallel`` (GNU OpenMP; Intel's runtime exports it too) runs a function on every
    thread of the calling thread's pool. ctypes releases the GIL for the call and takes it
    in the callback, so the threads set their mode one after another.
    """
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line or "libiomp" in line}
        if len(paths) != 1:
            return
        runtime = ctypes.CDLL(paths.pop())  # the copy torch loaded: the same handle, the same pool
        callback_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        callback = callback_type(lambda _: torch.set_flush_denormal(True))
        runtime.GOMP_parallel.argtypes = [callback_type, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        runtime.GOMP_parallel(callback, None, torch.get_num_threads(), 0)
    except (OSError, AttributeError):  # no /proc (macOS), or a runtime without GOMP_parallel
        return
