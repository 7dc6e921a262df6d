"""Names and builders the tests share (imported as ``from helpers import ...``; fixtures live in conftest.py)."""

import contextlib
from pathlib import Path
from typing import Callable, ContextManager

import torch

from seq2seq_attn.data.collate import collate
from seq2seq_attn.data.toy import make_examples, toy_vocab
from seq2seq_attn.modules import DECODERS, SCORERS, build_seq2seq
from seq2seq_attn.search import SearchSettings, greedy_search

# every valid (flow, attention) pair: each scorer in each attentional flow, plus the baseline
FLOW_ATTENTION = [(f, a) for f in sorted(DECODERS) if f != "none" for a in sorted(SCORERS)] + [("none", "none")]
# the same, with luong also without input feeding: (flow, attention, input_feed)
VARIANTS = [(f, a, True) for f, a in FLOW_ATTENTION] + [("luong", a, False) for a in sorted(SCORERS)]
CELLS = ["gru", "lstm"]
# the converge protocol in small on the toy task: a validation every 4 updates, last.ckpt every 2
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
TOY_CONVERGE = ["--config", str(EXPERIMENTS / "base.yaml"), "--config", str(EXPERIMENTS / "toy" / "reverse.yaml"),
    "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1000",
    "--trainer.val_check_interval", "4", "--trainer.check_val_every_n_epoch", "null",
    "--trainer.num_sanity_val_steps", "0", "--last_checkpoint.every_n_steps", "2",
    "--data.init_args.train_size", "1024", "--data.init_args.val_size", "16", "--data.init_args.test_size", "16",
    "--model.emb_size", "8", "--model.hidden_size", "8", "--seed_everything", "3"]  # fmt: skip
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


def gold_prefix(batch: int = 3, steps: int = 6) -> torch.Tensor:
    """Teacher-forced decoder input ``(B, T)`` starting with BOS."""
    trg_in = torch.randint(4, V_TRG, (batch, steps))
    trg_in[:, 0] = 1
    return trg_in


def memorise_reverse_pairs(
    build: Callable[[int], torch.nn.Module],
    lr: float = 0.02,
    steps: int = 300,
    compute: Callable[[torch.nn.Module], ContextManager] = lambda model: contextlib.nullcontext(),
) -> str:
    """Train ``build(vocabulary size)`` on 4 reverse pairs; '' once greedy search reproduces them all
    (checked every 25 updates), else a message with the final loss. Every forward pass and search runs
    inside ``compute(model)`` (a number format, say)."""
    vocab = toy_vocab(10)
    examples = make_examples("reverse", vocab, 4, 7, 4, seed=3)
    batch = collate([(i, ex.src, ex.trg, ex.alignment) for i, ex in enumerate(examples)])
    model = build(len(vocab))
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(1, steps + 1):
        model.train()
        with compute(model):
            logits = model(batch.src, batch.src_lengths, batch.trg_in).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.trg_out, ignore_index=0)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 25 == 0:
            model.eval()
            with compute(model):
                found = greedy_search(model, batch.src, batch.src_lengths, SearchSettings()).to_lists()
            if found == [e.trg for e in examples]:
                return ""
    return f"not memorised in {steps} steps (final loss {loss.item():.3f})"
