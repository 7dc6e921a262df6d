"""CPU process settings (seq2seq_attn/cpu.py): denormals flushed on every thread, freed memory kept."""

import os
import subprocess
import sys
from typing import Optional

import pytest

import seq2seq_attn.cpu as cpu

pytestmark = pytest.mark.slow  # fresh interpreters and kernels: seconds each

PROCESS = """
import torch
torch.set_num_threads(2)
from seq2seq_attn.cpu import configure, denormal_matrix
{before}
print(configure())
print(int((denormal_matrix(256, 512) @ torch.ones(512, 512)).count_nonzero()))
"""


def run_python(code: str, *args: str, tuning: Optional[str] = None) -> list[str]:
    """Run ``code`` in a fresh interpreter; ``tuning`` sets the opt-out variable. Returns its output lines."""
    env = {k: v for k, v in os.environ.items() if k != cpu.OPT_OUT}
    if tuning is not None:
        env[cpu.OPT_OUT] = tuning
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    return run.stdout.split()


def test_configure_flushes_denormals_on_every_thread():
    # fresh process, configured before any parallel work (as the CLI does): every block of the
    # product reads its denormal inputs as 0
    assert run_python(PROCESS.format(before="")) == ["True", "0"]


def test_configure_flushes_denormals_in_a_thread_pool_that_already_runs():
    # parallel work first (a notebook): the pool's threads exist without the mode; configure sets it
    # in each of them through the OpenMP runtime
    parallel_work = "(torch.randn(1 << 22) * 2).sum()\ndenormal_matrix(64, 512) @ torch.ones(512, 512)"
    assert run_python(PROCESS.format(before=parallel_work)) == ["True", "0"]


@pytest.mark.parametrize("value", ["0", "off"])
def test_the_opt_out_variable_leaves_denormals_alone(value):
    assert run_python(PROCESS.format(before=""), tuning=value) == ["False", str(256 * 512)]


def test_denormals_are_not_flushed_without_the_mode():
    # the same product without the mode: what the test above would see if flushing did nothing
    code = "import torch\nfrom seq2seq_attn.cpu import denormal_matrix\n"
    code += "print(int((denormal_matrix(256, 512) @ torch.ones(512, 512)).count_nonzero()))"
    assert run_python(code) == [str(256 * 512)]


def test_flush_denormals_reports_and_warns_when_threads_escaped(monkeypatch):
    monkeypatch.setattr(cpu, "_pool_flushes", lambda: False)
    monkeypatch.setattr(cpu, "_warned", False)
    with pytest.warns(UserWarning, match="flushed on the main thread only.*flush_denormals"):
        assert cpu.flush_denormals() is False
    monkeypatch.setattr(cpu, "_pool_flushes", lambda: True)
    assert cpu.flush_denormals() is True


MALLINFO = """
import ctypes, sys, torch
import seq2seq_attn.cpu as cpu
class MallInfo(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_int) for name in names.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo.restype = MallInfo
"""
RETAINED = (
    MALLINFO
    + """
if sys.argv[1] == "keep":
    assert cpu.keep_freed_memory()
x = torch.ones(40 << 18)  # 40 MB, as a step's logits
del x
print(libc.mallinfo().fordblks >> 20)  # MB freed but still mapped, for the next step to reuse
"""
)


@pytest.mark.parametrize("mode,retained", [("keep", True), ("default", False)])
def test_freed_memory_stays_in_the_process(mode, retained):
    (retained_mb,) = run_python(RETAINED, mode)
    # glibc's default maps a 40 MB block on its own and unmaps it when freed: the next step's
    # allocation then faults every 4 KB page back in
    assert (int(retained_mb) >= 40) is retained


LIBRARY_USE = (
    MALLINFO
    + """
from seq2seq_attn.cpu import denormal_matrix
from seq2seq_attn.inference import load_model
from seq2seq_attn.lit_module import Seq2SeqLitModule
module = Seq2SeqLitModule()
vocab = {"src": ["<pad>", "<s>", "</s>", "<unk>"], "trg": ["<pad>", "<s>", "</s>", "<unk>"]}
torch.save({"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict(), "vocab": vocab}, sys.argv[1])
load_model(sys.argv[1])
x = torch.ones(40 << 18)
del x
print(int((denormal_matrix(1, 8) * 1.0).count_nonzero()))  # main thread's mode
print(int((denormal_matrix(256, 512) @ torch.ones(512, 512)).count_nonzero()))  # the pool's
print(libc.mallinfo().fordblks >> 20)
"""
)


def test_building_and_loading_a_model_leave_the_process_alone(tmp_path):
    # a notebook or a script that imports the library: FTZ off in every thread, glibc's malloc as it was
    denormals, in_pool, retained_mb = run_python(LIBRARY_USE, str(tmp_path / "m.ckpt"))
    assert (denormals, in_pool) == ("8", str(256 * 512))
    assert int(retained_mb) < 40


def test_no_cpu_tuning_switch_sets_the_opt_out_for_the_process_and_its_children(monkeypatch, capsys):
    from seq2seq_attn import cli

    monkeypatch.setenv(cpu.OPT_OUT, "1")
    calls = []
    monkeypatch.setattr(cpu, "configure", lambda: calls.append(cpu.enabled()))
    with pytest.raises(SystemExit):
        cli.main(["--no-cpu-tuning", "report", "--help"])
    assert os.environ[cpu.OPT_OUT] == "0" and calls == [False]
    assert "seq2seq-attn report" in capsys.readouterr().out


def test_onednn_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(name, raising=False)
    assert cpu.bound_onednn_cache() and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(cpu.ONEDNN_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    assert not cpu.bound_onednn_cache() and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    monkeypatch.setenv("DNNL_PRIMITIVE_CACHE_CAPACITY", "8")  # oneDNN's older name counts as set too
    assert not cpu.bound_onednn_cache() and "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ


def test_ideep_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    assert cpu.bound_ideep_cache() and os.environ["LRU_CACHE_CAPACITY"] == str(cpu.IDEEP_CACHE)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "1024")
    assert not cpu.bound_ideep_cache() and os.environ["LRU_CACHE_CAPACITY"] == "1024"


SHAPES = """
import ctypes, os, torch
from seq2seq_attn.cpu import configure
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
def in_use():
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20
print(configure(), os.environ.get("LRU_CACHE_CAPACITY"), os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"))
torch.set_num_threads(1)
weight = torch.randn(512, 896, dtype=torch.bfloat16)
heap = []
for rows in range(100, 500):  # a new shape per product, as length-bucketed batches bring
    torch.randn(rows, 896, dtype=torch.bfloat16) @ weight.t()
    if rows in (299, 499):
        heap.append(in_use())
print(round(heap[1] - heap[0]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallinfo2 is glibc's")
def test_bf16_products_of_ever_new_shapes_stop_growing_the_process():
    """400 bf16 products of new shapes: once oneDNN's and ideep's bounded caches are full (64 shapes each), the
    last 200 leave the heap as it was (with ideep's default of 1,024 cached computations they grew it by
    about 100 MB on a Zen 4 EPYC)."""
    configured, lru, onednn, growth_mb = run_python(SHAPES)
    assert (configured, lru, onednn) == ("True", str(cpu.IDEEP_CACHE), str(cpu.ONEDNN_CACHE))
    assert int(growth_mb) < 8
