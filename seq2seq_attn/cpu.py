"""Process-wide CPU settings for speed: flush denormals, keep freed memory, bound oneDNN's caches.

:func:`configure` applies them all. They change the whole process (numpy and fp64 work too,
every later allocation, every later oneDNN primitive), so the library never calls it on import or when a model is
built: only where the project owns the process, first thing in the ``seq2seq-attn``
command, an ablation cell and the benchmarks. A notebook that wants the speed calls
``seq2seq_attn.cpu.configure()`` itself, before any other torch work. Opt out with the
environment variable ``S2S_CPU_TUNING=0`` or ``seq2seq-attn --no-cpu-tuning COMMAND ...``
(which sets that variable, so ablation cells and DDP processes inherit it).

**Denormals.** Attention makes denormal numbers (magnitudes below 1.2e-38): softmax
weights of far-off source words underflow into that range, and the backward pass
spreads them into the gradients of the keys, the encoder and the projections. On x86
CPUs every arithmetic operation on a denormal takes a slow microcode path: a 2048²
fp32 matrix product with denormal inputs took 11.9 s instead of 0.05 s on the 2-core
development machine, and Luong general attention trained 40% faster with denormals
flushed (``benchmarks/throughput.py``). Flushing (the CPU's FTZ and DAZ modes,
``torch.set_flush_denormal``) turns those values into 0, a change of at most 1.2e-38
per value. The mode belongs to each thread, and threads inherit it when they are
created. torch's OpenMP thread pool (shared by the BLAS) starts with the first
parallel operation, so the mode is best set before any torch work; if the pool
already runs (in a notebook, say), :func:`flush_denormals` sets the mode inside
every pool thread through the OpenMP runtime, and warns once if even that fails.

**Freed memory.** A training or decoding step allocates and frees tensors of tens of
megabytes (logits, the additive scorer's tanh block). glibc hands such blocks back to
the kernel when they are freed, and the next allocation faults every 4 KB page back
in: a (320, 35, 512) tanh output in beam search took 5,600 page faults and 6 ms
instead of 1.9 ms. :func:`keep_freed_memory` raises glibc's mmap and trim thresholds
(to 64 and 256 MiB) so that freed blocks stay in the process for the next step:
training the Multi30k model ran 4-8% faster, at the same peak RSS.

**oneDNN's primitive cache.** bf16 matrix products on CPU run through oneDNN, which builds a
"primitive" for every distinct shape and keeps up to 1,024 of them, with their buffers. Length-bucketed
batches give a new shape for nearly every (batch, length) pair, so under bf16 training the cache filled
and the process grew by hundreds of megabytes (Luong general + feeding, 160 updates, peak RSS 1,556 MB in
bf16 against 860 MB in fp32). :func:`bound_onednn_cache` sets ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to
:data:`ONEDNN_CACHE` unless it is set already: 1,104 MB at the same speed (capacity 0, no cache: 1,282 MB
and 36% slower; ``docs/measurements/bf16_training.md``). oneDNN reads the variable once, at its first primitive, so
this too must come before any bf16 work.

**ideep's cache.** PyTorch reaches oneDNN through ideep, which keeps its own cache of prepared
computations, also up to 1,024 by default and also one per shape. Bounding oneDNN's alone left it
growing: a bf16-mixed training process (Luong general + feeding, Multi30k) held 587 MB on its heap after
400 updates against 303 MB in fp32, still rising; with ideep's cache bounded too it held 314 MB from the
50th update on. :func:`bound_ideep_cache` sets ``LRU_CACHE_CAPACITY`` to :data:`IDEEP_CACHE` unless it
is set already (``tests/test_cpu.py`` checks that new shapes stop growing the heap once both are full).
"""

import ctypes
import os
import platform
import warnings

import torch

_warned = False
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD, TRIM_THRESHOLD = 64 << 20, 256 << 20
ONEDNN_CACHE = 64  # oneDNN primitives kept (its default: 1,024)
# computations kept by ideep, PyTorch's layer over oneDNN (LRU_CACHE_CAPACITY; default 1,024): 16 trained as fast
# as 64 and in less memory in two runs each (docs/measurements/bf16_training.md)
IDEEP_CACHE = 16


OPT_OUT = "S2S_CPU_TUNING"  # "0", "false", "no" or "off": leave the process as it is


def enabled() -> bool:
    """Whether :func:`configure` applies its settings (the opt-out variable is not set)."""
    return os.environ.get(OPT_OUT, "1").strip().lower() not in ("0", "false", "no", "off")


def configure() -> bool:
    """Flush denormals, keep freed memory, bound oneDNN's cache (each a no-op where it does not apply).

    Returns False, changing nothing, where the ``S2S_CPU_TUNING`` opt-out is set."""
    if not enabled():
        return False
    bound_onednn_cache()
    bound_ideep_cache()
    flush_denormals()
    keep_freed_memory()
    return True


def bound_onednn_cache() -> bool:
    """Keep at most :data:`ONEDNN_CACHE` oneDNN primitives, unless the variable is set; returns whether it set it."""
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ or "DNNL_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(ONEDNN_CACHE)
    return True


def bound_ideep_cache() -> bool:
    """Keep at most :data:`IDEEP_CACHE` of ideep's cached bf16 matmul computations, unless
    ``LRU_CACHE_CAPACITY`` is set; returns whether it set it."""
    if "LRU_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["LRU_CACHE_CAPACITY"] = str(IDEEP_CACHE)
    return True


def keep_freed_memory() -> bool:
    """Let glibc keep freed blocks for reuse instead of unmapping them; returns whether it applied."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        # blocks up to 64 MiB come from the heap (a step's logits are ~20 MB), and up to 256 MiB of
        # free heap top stay mapped; glibc's defaults: 128 KiB, rising with use to 32 MiB, and twice that
        mmap = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        return bool(mmap) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


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
