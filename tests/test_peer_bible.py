"""benchmarks/peers/bible_onmt.py hands the peer exactly our cells' pieces and scores it as our cells are scored."""

import importlib.util
from pathlib import Path

import pytest

from seq2seq_attn.data.parallel import ParallelDataModule

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "bible_onmt.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bible_onmt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("cap", [None, 8])  # --train-max-words: a capped cell's training pairs
def test_the_peer_gets_our_training_pairs_pieces_and_references(tmp_path, cap):
    peer = load_script()
    data = ParallelDataModule(corpus="bible_en_es", src_lang="en", trg_lang="es", tokenizer="bpe", vocab_size=300,
                              min_freq=2, max_length=12, train_max_words=cap)  # fmt: skip
    data.setup()
    peer.export(data, tmp_path)
    for split in ("train", "val", "test"):
        src = (tmp_path / "data" / f"{split}.src").read_text(encoding="utf-8").splitlines()
        trg = (tmp_path / "data" / f"{split}.trg").read_text(encoding="utf-8").splitlines()
        ours = data.datasets[split].examples
        assert len(src) == len(trg) == len(ours)  # train: the same pairs kept by the 12-piece filter
        assert [data.src_vocab.encode(line.split()) for line in src] == [e.src for e in ours]
        assert [data.trg_vocab.encode(line.split()) for line in trg] == [e.trg for e in ours]
    kept = len((tmp_path / "data" / "train.src").read_text(encoding="utf-8").splitlines())
    assert 0 < kept < len(data.text["train"][0])  # the filter dropped the pairs our data module drops
    if cap:  # fewer pairs than the uncapped module keeps
        uncapped = ParallelDataModule(corpus="bible_en_es", src_lang="en", trg_lang="es", tokenizer="bpe",
                                      vocab_size=300, min_freq=2, max_length=12)  # fmt: skip
        uncapped.setup()
        assert kept < len(uncapped.datasets["train"].examples)
    counts = dict(line.split("\t") for line in (tmp_path / "data" / "vocab.trg").read_text().splitlines())
    trained = [p for line in (tmp_path / "data" / "train.trg").read_text().splitlines() for p in line.split()]
    assert sum(map(int, counts.values())) == len(trained)

    # the reference pieces as the peer's output: detokenised back to the raw references, BLEU 100
    hyp = tmp_path / "val.hyp"
    hyp.write_text((tmp_path / "data" / "val.trg").read_text(encoding="utf-8"), encoding="utf-8")
    overall, by_bucket, rows = peer.score(data, "val", hyp)
    assert overall["bleu"] == pytest.approx(100.0)
    assert all(b["bleu"] == pytest.approx(100.0) for b in by_bucket.values())
    assert [r["ref"] for r in rows] == data.text["val"][1] and sum(b["count"] for b in by_bucket.values()) == len(rows)


def test_the_peers_clock_is_read_from_its_log_timestamps():
    peer = load_script()
    log = "\n".join([
        "[2026-12-05 10:00:00,500 INFO] Loading vocab from text file...",
        "[2026-12-05 10:00:02,000 INFO] Starting training on CPU, could be very slow",
        "[2026-12-05 10:00:30,250 INFO] Step 50/ 1600; acc: 3.1; ppl: 5000.2; xent: 8.5; lr: 0.00100; sents: 3200; "
        "bsz: 1500/1600/64; 2100/2300 tok/s;     30 sec;",
        "some line a library printed without a timestamp",
        "[2026-12-05 10:02:01,500 INFO] Step 200/ 1600; acc: 9.0; ppl: 900.0; xent: 6.8; lr: 0.00100; sents: 12800; "
        "bsz: 1500/1600/64; 2100/2300 tok/s;    121 sec;",
        "[2026-12-05 10:02:09,000 INFO] Validation perplexity: 850.1",
    ])  # fmt: skip
    assert peer.training_clock(log) == {50: 29.75, 200: 121.0}
