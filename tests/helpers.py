"""Names and builders the tests share (imported as ``from helpers import ...``; fixtures live in conftest.py)."""

import torch

from seq2seq_attn.modules import DECODERS, SCORERS, build_seq2seq

# every valid (flow, attention) pair: each scorer in each attentional flow, plus the baseline
FLOW_ATTENTION = [(f, a) for f in sorted(DECODERS) if f != "none" for a in sorted(SCORERS)] + [("none", "none")]
# the same, with luong also without input feeding: (flow, attention, input_feed)
VARIANTS = [(f, a, True) for f, a in FLOW_ATTENTION] + [("luong", a, False) for a in sorted(SCORERS)]
CELLS = ["gru", "lstm"]
# attention beyond the plain global scorers: (flow, attention, input_feed, options); adding one here tests it
# in every flow-independent property (equivalence of teacher forcing and stepping, batched search, overfit)
ATTENTION_VARIANTS = [
    ("luong", "general", True, {"alignment": "local-m", "window": 1}),
    ("bahdanau", "dot", True, {"alignment": "local-m", "window": 2}),
    ("luong", "general", False, {"alignment": "local-p", "window": 2}),
    ("bahdanau", "additive", True, {"alignment": "local-p", "window": 1}),
    ("luong", "additive", True, {"coverage": True}),
    ("luong", "concat", False, {"coverage": True}),
    ("bahdanau", "additive", True, {"coverage": True, "alignment": "local-m", "window": 2}),
    ("luong", "general", True, {"heads": 2}),
    ("luong", "scaled_dot", False, {"heads": 4}),
    ("bahdanau", "dot", True, {"heads": 2}),
    ("luong", "location", True, {"max_source_length": 4}),
]


def variant_id(variant) -> str:
    flow, attention, feed, options = variant
    return "-".join([flow, attention, "feed" if feed else "nofeed", *(f"{k}={v}" for k, v in options.items())])


V_SRC, V_TRG = 13, 11


def tiny_model(flow, attention, cell, input_feed=True, layers=2, dtype=torch.float32, **options):
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
        **options,
    )
    return model.to(dtype).eval()
