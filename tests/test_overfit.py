"""Every flow x scorer (and the baseline) can memorise a handful of reverse pairs."""

import pytest
from helpers import VARIANTS, memorise_reverse_pairs

from seq2seq_attn.modules import build_seq2seq


@pytest.mark.parametrize("flow,attention,input_feed", VARIANTS)
def test_overfit_four_reverse_pairs(flow, attention, input_feed):
    def build(vocab: int):
        return build_seq2seq(vocab, vocab, attention=attention, flow=flow, emb_size=16, hidden_size=16,
                             input_feed=input_feed)  # fmt: skip

    assert not (failure := memorise_reverse_pairs(build)), failure
