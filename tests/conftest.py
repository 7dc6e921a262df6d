"""Shared fixtures: tiny seeded tensors and models, one thread, no W&B."""

import os
from pathlib import Path

import pytest
import torch

from seq2seq_attn.modules import DECODERS, SCORERS, build_seq2seq

os.environ.setdefault("WANDB_MODE", "disabled")
# the test process is a library user's: the CPU tuning of seq2seq_attn/cpu.py stays off in it
os.environ.setdefault("S2S_CPU_TUNING", "0")
# the shared corpora beside the repository (CI sets the same); never copied into the repo
os.environ.setdefault("S2S_DATA_ROOT", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
torch.set_num_threads(1)

# every valid (flow, attention) pair: each scorer in each attentional flow, plus the baseline
FLOW_ATTENTION = [(f, a) for f in sorted(DECODERS) if f != "none" for a in sorted(SCORERS)] + [("none", "none")]
# the same, with luong also without input feeding: (flow, attention, input_feed)
VARIANTS = [(f, a, True) for f, a in FLOW_ATTENTION] + [("luong", a, False) for a in sorted(SCORERS)]
CELLS = ["gru", "lstm"]
V_SRC, V_TRG = 13, 11


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def src_batch():
    """B=3, S=5, lengths [5, 3, 1]: padded with 0."""
    lengths = torch.tensor([5, 3, 1])
    src = torch.randint(4, V_SRC, (3, 5))
    src[torch.arange(5).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return src, lengths


def tiny_model(flow, attention, cell, input_feed=True, layers=2, dtype=torch.float32):
    model = build_seq2seq(
        V_SRC,
        V_TRG,
        attention=attention,
        flow=flow,
        cell=cell,
        emb_size=6,
        hidden_size=4,
        num_layers=layers,
        input_feed=input_feed,
    )
    return model.to(dtype).eval()
