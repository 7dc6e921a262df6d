"""Names and builders the tests share (imported as ``from helpers import ...``; fixtures live in conftest.py)."""

import torch

from seq2seq_attn.modules import DECODERS, SCORERS, build_seq2seq

# every valid (flow, attention) pair: each scorer in each attentional flow, plus the baseline
FLOW_ATTENTION = [(f, a) for f in sorted(DECODERS) if f != "none" for a in sorted(SCORERS)] + [("none", "none")]
# the same, with luong also without input feeding: (flow, attention, input_feed)
VARIANTS = [(f, a, True) for f, a in FLOW_ATTENTION] + [("luong", a, False) for a in sorted(SCORERS)]
CELLS = ["gru", "lstm"]
V_SRC, V_TRG = 13, 11


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
