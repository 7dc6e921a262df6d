"""Text tokenizers: word and BPE round trips, shared vocabularies."""

from pathlib import Path

import pytest
from test_corpora import tiny_corpus

from seq2seq_attn.data import ParallelDataModule
from seq2seq_attn.data.corpora import read_lines
from seq2seq_attn.data.tokenizer import TextTokenizer

FIXTURES = Path(__file__).resolve().parent / "data" / "corpora"


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_tokenizer_round_trip(kind):
    lines = read_lines(FIXTURES / "bible_en_es" / "train.en.gz")
    tok = TextTokenizer.train(lines, kind, vocab_size=4000, min_freq=1)
    for line in lines[:50]:
        assert tok.detokenize(tok.tokenize(line)) == " ".join(line.split())
    clone = TextTokenizer.from_json(tok.to_json())
    assert clone.tokenize(lines[0]) == tok.tokenize(lines[0])


def test_joint_bpe_shares_one_vocabulary(tmp_path):
    dm = ParallelDataModule(
        None, "de", "en", data_dir=str(tiny_corpus(tmp_path)), tokenizer="bpe", joint=True, vocab_size=200, min_freq=1
    )
    assert dm.src_vocab == dm.trg_vocab
