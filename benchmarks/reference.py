"""The reference model size every benchmark uses (the shared model of the peer comparison).

Embeddings 256, bidirectional GRU 256 per direction, GRU decoder 512 (= 2 x 256, so ``dot``
fits too), dropout 0.2.
"""

from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.optim import adam

SIZES = {"emb_size": 256, "hidden_size": 256, "dec_hidden_size": 512, "dropout": 0.2}


def reference_model(src_vocab: int, trg_vocab: int, flow: str, attention: str, input_feed: bool):
    return build_seq2seq(src_vocab, trg_vocab, attention=attention, flow=flow, input_feed=input_feed, **SIZES)


def reference_optimizer(model):
    """Adam 1e-3, built as the Lightning module builds it (fused where torch can)."""
    return adam(model.parameters(), lr=1e-3)
