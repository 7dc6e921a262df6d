"""Every flow x scorer (and the baseline) can memorise a handful of reverse pairs."""

import pytest
import torch
from helpers import VARIANTS

from seq2seq_attn.data.collate import collate
from seq2seq_attn.data.toy import make_examples, toy_vocab
from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.search import SearchSettings, greedy_search


@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_overfit_four_reverse_pairs(flow, attention, input_feed):
    vocab = toy_vocab(10)
    examples = make_examples("reverse", vocab, 4, 7, 4, seed=3)
    batch = collate([(i, ex.src, ex.trg, ex.alignment) for i, ex in enumerate(examples)])
    model = build_seq2seq(
        len(vocab),
        len(vocab),
        attention=attention,
        flow=flow,
        emb_size=16,
        hidden_size=16,
        input_feed=input_feed,
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=0.02)
    solved_at = None
    for step in range(1, 301):
        model.train()
        logits = model(batch.src, batch.src_lengths, batch.trg_in).logits
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.trg_out, ignore_index=0)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 25 == 0:
            model.eval()
            hyp = greedy_search(model, batch.src, batch.src_lengths, SearchSettings()).to_lists()
            if hyp == [ex.trg for ex in examples]:
                solved_at = step
                break
    assert solved_at is not None, f"not memorised in 300 steps (final loss {loss.item():.3f})"
