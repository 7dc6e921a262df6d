"""CPU process settings (seq2seq_attn/cpu.py): denormals flushed on every thread, freed memory kept."""

import subprocess
import sys

import pytest

import seq2seq_attn.cpu as cpu

PROCESS = """
import torch
torch.set_num_threads(2)
from seq2seq_attn.cpu import denormal_matrix
from seq2seq_attn.lit_module import Seq2SeqLitModule
{before}
Seq2SeqLitModule()  # building the module sets the mode
print(int((denormal_matrix(256, 512) @ torch.ones(512, 512)).count_nonzero()))
"""


def nonzero_after_building_the_module(before: str) -> int:
    code = PROCESS.format(before=before)
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_the_module_flushes_denormals_on_every_thread():
    # fresh process, module built before any parallel work (as the CLI does): every block of the
    # product reads its denormal inputs as 0
    assert nonzero_after_building_the_module("") == 0


def test_the_module_flushes_denormals_in_a_thread_pool_that_already_runs():
    # parallel work first (a notebook): the pool's threads exist without the mode; the module sets it
    # in each of them through the OpenMP runtime
    parallel_work = "(torch.randn(1 << 22) * 2).sum()\ndenormal_matrix(64, 512) @ torch.ones(512, 512)"
    assert nonzero_after_building_the_module(parallel_work) == 0


def test_denormals_are_not_flushed_without_the_mode():
    # the same product without the mode: what the test above would see if flushing did nothing
    code = "import torch\nfrom seq2seq_attn.cpu import denormal_matrix\n"
    code += "print(int((denormal_matrix(256, 512) @ torch.ones(512, 512)).count_nonzero()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == 256 * 512


def test_flush_denormals_reports_and_warns_when_threads_escaped(monkeypatch):
    monkeypatch.setattr(cpu, "_pool_flushes", lambda: False)
    monkeypatch.setattr(cpu, "_warned", False)
    with pytest.warns(UserWarning, match="flushed on the main thread only.*flush_denormals"):
        assert cpu.flush_denormals() is False
    monkeypatch.setattr(cpu, "_pool_flushes", lambda: True)
    assert cpu.flush_denormals() is True


RETAINED = """
import ctypes, sys, torch
import seq2seq_attn.cpu as cpu
class MallInfo(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(name, ctypes.c_int) for name in names.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo.restype = MallInfo
if sys.argv[1] == "keep":
    assert cpu.keep_freed_memory()
x = torch.ones(40 << 18)  # 40 MB, as a step's logits
del x
print(libc.mallinfo().fordblks >> 20)  # MB freed but still mapped, for the next step to reuse
"""


@pytest.mark.parametrize("mode,retained", [("keep", True), ("default", False)])
def test_freed_memory_stays_in_the_process(mode, retained):
    run = subprocess.run([sys.executable, "-c", RETAINED, mode], capture_output=True, text=True, check=True)
    # glibc's default maps a 40 MB block on its own and unmaps it when freed: the next step's
    # allocation then faults every 4 KB page back in
    assert (int(run.stdout) >= 40) is retained
