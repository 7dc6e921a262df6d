"""fp32, bf16 or int8: which number format pays on this machine (``--trainer.precision auto``).

bf16 halves the bytes of every tensor, but it pays in speed only where the CPU multiplies bf16
matrices much faster than fp32: Intel Xeons with AMX (4th generation and later) do, several
times over; CPUs with AVX-512 BF16 alone may not (a 2-core Xeon VM without AMX ran bf16 GEMMs at
half its fp32 rate), and CPUs without either emulate bf16 slowly. What the flags promise and what
the library's kernels deliver differ, so the choice rests on a measurement:

* :func:`probe` times matrix products of this project's model sizes (one decoder step, the output
  layer, an encoder block) in fp32, bf16 and int8 (the dynamically quantised ``nn.Linear``
  that ``--int8`` decoding uses), about 3 s in all;
* :func:`machine_rates` caches the rates per machine (CPU model and flags, torch version, threads)
  in ``$S2S_CACHE_DIR`` (default ``~/.cache/seq2seq-attn``), so later runs pay nothing;
* :func:`training_precision` picks ``bf16-mixed`` where bf16 runs >= :data:`BF16_SPEEDUP` x fp32 and
  ``32-true`` elsewhere, and says why; the run folder records it (``precision.json``);
* :func:`decoding_precision` picks the fastest of fp32, bf16 and int8 for ``translate`` and
  ``evaluate`` on CPU. int8 decoding matched fp32's BLEU within 0.42 on the measured Multi30k models
  (``docs/measurements/peers.md``), so the fastest is taken as equal in quality.

Training precisions: ``32-true``; Lightning's ``bf16-mixed`` (autocast: each matrix product casts its
fp32 inputs, and keeps fp32 activations for backward wherever an op is not on autocast's bf16 list);
and ``bf16-compute`` (:func:`bf16_weights`): every floating-point parameter and buffer is cast to bf16
once per forward pass, under autocast, so the whole model computes and keeps its activations in bf16,
while the optimiser steps the fp32 weights (the "master weights" of mixed-precision training: the
gradients flow back through the cast). The loss, the attention and output softmaxes and the search's
scores stay fp32 as under ``bf16-mixed``.

On CUDA, ``auto`` keeps fp32: at these model sizes bf16 autocast measured slower on an H200 (the
models are bound by per-step kernel launches, not by matrix products; ``docs/performance.md``).
"""

import contextlib
import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

BF16_SPEEDUP = 2.0  # bf16 training where bf16 GEMMs run at least this many times fp32's rate
# (m, k, n): one decoder step of 64 sentences (GRU gates of a 512 state), the output layer over a
# bucket of 896 target tokens and an 8,000-word vocabulary, a 1024-row encoder block
SHAPES = ((64, 512, 1536), (896, 512, 8000), (1024, 512, 1536))
TRAINING_CHOICES = ("32-true", "bf16-mixed", "bf16-compute")
# what ``auto`` trains in where bf16 pays: bf16-mixed and bf16-compute trained level within run-to-run
# noise (benchmarks/throughput.py, docs/measurements/bf16_training.md), and bf16-mixed is Lightning's own
BF16_TRAINING = "bf16-mixed"
DECODING_CHOICES = ("fp32", "bf16", "int8")

Rates = dict[str, float]  # number format -> GFLOP/s, geometric mean over SHAPES


@dataclass(frozen=True)
class PrecisionChoice:
    """What ``auto`` resolved to, why, and from which measurement."""

    requested: str
    precision: str
    reason: str
    rates: Optional[Rates] = None
    machine: str = ""
    cached: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def _gemm_seconds(run: Callable[[], object], seconds: float) -> float:
    """Seconds per call of ``run``, over at least ``seconds`` after two warm-up calls."""
    run(), run()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or calls < 3:
        run()
        calls += 1
    return (time.perf_counter() - start) / calls


def _int8_linear(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The int8 GEMM of ``--int8`` decoding (fbgemm's dynamically quantised Linear)."""
    import warnings

    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(torch.nn.Sequential(linear), {"0": default_dynamic_qconfig}, inplace=False)


def probe(seconds: float = 0.25) -> Rates:
    """GFLOP/s of fp32, bf16 and int8 matrix products at :data:`SHAPES` on this machine, now
    (geometric mean over the shapes; int8 is the quantised Linear, input quantisation included)."""
    logs: dict[str, float] = {name: 0.0 for name in DECODING_CHOICES}
    with torch.no_grad():
        for m, k, n in SHAPES:
            x, w = torch.randn(m, k), torch.randn(n, k) / k**0.5
            runs = {
                "fp32": partial(torch.matmul, x, w.T),
                "bf16": partial(torch.matmul, x.bfloat16(), w.T.bfloat16()),
                "int8": partial(_int8_linear(w), x),
            }
            for name, run in runs.items():
                logs[name] += math.log(2 * m * k * n / _gemm_seconds(run, seconds) / 1e9)
    return {name: round(math.exp(total / len(SHAPES)), 1) for name, total in logs.items()}


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, list[str]]:
    """The CPU's model name with its family and model numbers, and the flags that decide bf16/int8 speed.

    Read from Linux's ``/proc/cpuinfo``. Cloud machines often report a bare name ("AMD EPYC") for CPUs
    of different generations, so the family and model numbers are appended where the file has them:
    "AMD EPYC (family 25, model 17)" is a Zen 4, "(family 25, model 1)" a Zen 3 without AVX-512.
    """
    model, flags, numbers = platform.processor() or platform.machine(), [], {}
    try:
        with open(cpuinfo) as info:
            for line in info:  # the first processor's block: up to the first blank line
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                if key in ("cpu family", "model"):
                    numbers[key] = value.strip()
                if key in ("flags", "Features") and not flags:
                    wanted = ("amx", "avx512_bf16", "avx512_vnni", "avx_vnni", "avx512f", "bf16", "i8mm", "sve")
                    flags = sorted(f for f in value.split() if f.startswith(wanted))
    except OSError:
        pass
    if len(numbers) == 2:
        model = f"{model} (family {numbers['cpu family']}, model {numbers['model']})"
    return model, flags


def machine_key() -> str:
    """What the rates depend on: CPU model and flags, torch version, threads."""
    model, flags = cpu_description()
    threads = torch.get_num_threads()
    digest = hashlib.sha1(f"{model}|{' '.join(flags)}|{torch.__version__}|{threads}".encode()).hexdigest()[:10]
    return f"{model}, {threads} threads, torch {torch.__version__} [{digest}]"


def cache_path() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seq2seq-attn"
    return Path(os.environ.get("S2S_CACHE_DIR") or default) / "precision_probe.json"


def machine_rates(measure: Optional[Callable[[], Rates]] = None) -> tuple[Rates, bool]:
    """This machine's rates, from the cache when it has them (``(rates, True)``), else measured and cached."""
    path, key = cache_path(), machine_key()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if isinstance(cache.get(key), dict) and all(isinstance(cache[key].get(n), (int, float)) for n in DECODING_CHOICES):
        return {n: float(cache[key][n]) for n in DECODING_CHOICES}, True
    rates = (measure or probe)()
    try:  # written atomically: DDP processes may probe at the same moment
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({**cache, key: rates}, indent=1))
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home: measure again next time
    return rates, False


def forget_machine() -> None:
    """Drop this machine's cached rates: the next choice measures again."""
    path = cache_path()
    try:
        cache = json.loads(path.read_text())
        cache.pop(machine_key(), None)
        path.write_text(json.dumps(cache, indent=1))
    except (OSError, ValueError):
        pass


@contextlib.contextmanager
def bf16_weights(module: nn.Module, dtype: torch.dtype = torch.bfloat16) -> Iterator[None]:
    """Within the block, ``module`` computes with ``dtype`` copies of its floating-point parameters and
    buffers, cast once on entry (not once per use: the decoder reads its weights at every target step),
    under autocast for the ops whose inputs still mix formats. The cast is part of the graph, so
    ``backward`` gives the fp32 parameters their gradients and the optimiser steps them as usual.

    The copies shadow the attributes (an instance attribute is found before ``nn.Module.__getattr__``
    looks in ``_parameters``), so ``parameters()``, ``state_dict()``, checkpoints, the optimiser and DDP
    see the fp32 tensors throughout; nn.RNN's flat weight list is shadowed the same way. Tied
    parameters stay tied (one copy)."""
    copies: dict[int, torch.Tensor] = {}
    shadowed: list[tuple[nn.Module, str, Optional[list]]] = []  # (owner, attribute, what __dict__ had)

    def cast(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point() and tensor.dtype != dtype and id(tensor) not in copies:
            copies[id(tensor)] = tensor.to(dtype)
        return copies.get(id(tensor), tensor)

    try:
        for owner in module.modules():
            tensors = {**owner._parameters, **owner._buffers}
            if isinstance(getattr(owner, "_flat_weights", None), list):  # nn.RNN/GRU/LSTM read this list
                shadowed.append((owner, "_flat_weights", owner._flat_weights))
                owner.__dict__["_flat_weights"] = [None if w is None else cast(w) for w in owner._flat_weights]
            for name, tensor in tensors.items():
                if tensor is not None and cast(tensor) is not tensor:
                    shadowed.append((owner, name, None))
                    owner.__dict__[name] = cast(tensor)
        with torch.autocast(_device_type(module), dtype=dtype):
            yield
    finally:
        for owner, name, original in reversed(shadowed):
            if original is None:
                del owner.__dict__[name]
            else:
                owner.__dict__[name] = original


def _device_type(module: nn.Module) -> str:
    first = next(iter(module.parameters()), None)
    return first.device.type if first is not None else "cpu"


def _on_cuda(accelerator: object) -> bool:
    name = str(accelerator or "auto")
    return name.startswith(("cuda", "gpu")) or (name == "auto" and torch.cuda.is_available())


def training_precision(accelerator: object = "auto", measure: Optional[Callable[[], Rates]] = None) -> PrecisionChoice:
    """``bf16-mixed`` where this CPU's bf16 GEMMs run >= :data:`BF16_SPEEDUP` x fp32, else ``32-true``."""
    if _on_cuda(accelerator):
        return PrecisionChoice(
            "auto", "32-true", "CUDA: bf16 autocast measured slower than fp32 at these model sizes on an H200"
        )
    rates, cached = machine_rates(measure)
    ratio = rates["bf16"] / rates["fp32"]
    chosen = BF16_TRAINING if ratio >= BF16_SPEEDUP else "32-true"
    verdict = ">=" if ratio >= BF16_SPEEDUP else "<"
    reason = (
        f"bf16 GEMMs run at {rates['bf16']:.0f} GFLOP/s, {ratio:.2f}x fp32's {rates['fp32']:.0f} "
        f"({verdict} the {BF16_SPEEDUP:g}x that bf16 training needs to pay)"
    )
    return PrecisionChoice("auto", chosen, reason, rates, machine_key(), cached)


def decoding_precision(device: str, measure: Optional[Callable[[], Rates]] = None) -> PrecisionChoice:
    """The fastest of fp32, bf16 and int8 on this CPU (fp32 on CUDA)."""
    if not device.startswith("cpu"):
        return PrecisionChoice("auto", "fp32", f"{device}: int8 runs on CPU only, bf16 measured slower on an H200")
    rates, cached = machine_rates(measure)
    fastest = max(DECODING_CHOICES, key=lambda name: rates[name])
    listed = ", ".join(f"{name} {rates[name]:.0f}" for name in DECODING_CHOICES)
    reason = f"the fastest matrix products on this CPU (GFLOP/s: {listed})"
    return PrecisionChoice("auto", fastest, reason, rates, machine_key(), cached)


def describe(choice: PrecisionChoice) -> str:
    """One line for the console."""
    source = "cached probe" if choice.cached else "probe" if choice.rates else "rule"
    return f"precision auto -> {choice.precision}: {choice.reason} ({source})"
