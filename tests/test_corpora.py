"""Parallel text on disk: named corpora, bad input, downloads (against a local server)."""

import contextlib
import gzip
import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from seq2seq_attn.data import ParallelDataModule
from seq2seq_attn.data.corpora import read_lines
from seq2seq_attn.data.fetch import SOURCES, Remote, fetch, sha256_of
from seq2seq_attn.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "data" / "corpora"  # generated text in the real corpora's layout


def write(folder, name, lines, raw=None):
    folder.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else "".join(f"{line}\n" for line in lines).encode("utf-8")
    (folder / name).write_bytes(data)


def tiny_corpus(folder, n=40):
    src = [f"ein mann nummer {i} geht ." for i in range(n)]
    trg = [f"a man number {i} walks ." for i in range(n)]
    for split in ("train", "val", "test"):
        write(folder, f"{split}.de", src)
        write(folder, f"{split}.en", trg)
    return folder


def check_multi30k_slice(folder: Path, min_vocab: int) -> None:
    dm = ParallelDataModule("multi30k", "de", "en", max_train=500, max_eval=30, min_freq=1)
    dm.setup("fit")
    assert len(dm.datasets["train"]) <= 500 and len(dm.datasets["test"]) == 30
    assert dm.src_vocab.itos[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and dm.src_vocab_size > min_vocab
    first = dm.datasets["test"].examples[0]
    assert dm.source_length("test", 0) == len(dm.source_text("test", 0).split())
    assert dm.reference("test", 0) == read_lines(folder / "test_2016_flickr.en.gz")[0]
    assert len(first.src) >= dm.source_length("test", 0)  # punctuation is split off


def test_multi30k_slice_from_the_data_root():
    check_multi30k_slice(FIXTURES / "multi30k", min_vocab=30)


@pytest.mark.corpus
def test_multi30k_slice_from_the_full_corpus(real_corpus):
    check_multi30k_slice(real_corpus("multi30k"), min_vocab=500)


def test_bad_inputs_fail_in_one_line(tmp_path):
    folder = tiny_corpus(tmp_path / "ok")
    write(folder, "train.en", ["only one line"])
    with pytest.raises(ConfigError, match=r"train\.de has 40 lines, .*train\.en has 1"):
        ParallelDataModule(None, "de", "en", data_dir=str(folder))
    with pytest.raises(ConfigError, match="missing file .*train.fr"):
        ParallelDataModule(None, "de", "fr", data_dir=str(tiny_corpus(tmp_path / "b")))
    empty = tmp_path / "empty"
    write(empty, "train.de", [])
    write(empty, "train.en", [])
    with pytest.raises(ConfigError, match="empty"):
        ParallelDataModule(None, "de", "en", data_dir=str(empty))
    utf = tiny_corpus(tmp_path / "utf")
    write(utf, "train.de", [], raw=b"gut\nschlecht \xff\xfe hier\n")
    write(utf, "train.en", ["good", "bad"])
    with pytest.raises(ConfigError, match=r"train\.de: line 2 is not valid UTF-8"):
        ParallelDataModule(None, "de", "en", data_dir=str(utf))
    for name, data in (("cut", gzip.compress(b"ein hund .\n" * 500)[:60]), ("plain", b"not gzip\n")):
        broken = tiny_corpus(tmp_path / name)
        (broken / "train.de").unlink()
        write(broken, "train.de.gz", [], raw=data)
        with pytest.raises(ConfigError, match=r"train\.de\.gz is a truncated or corrupt gzip file.*delete it"):
            ParallelDataModule(None, "de", "en", data_dir=str(broken))
    with pytest.raises(ConfigError, match="unknown corpus 'wmt14'"):
        ParallelDataModule("wmt14", "de", "en")
    with pytest.raises(ConfigError, match="has no language 'xx'"):
        ParallelDataModule("multi30k", "xx", "en")


def test_empty_lines_dropped_in_training_kept_in_evaluation(tmp_path):
    folder = tiny_corpus(tmp_path)
    write(folder, "train.de", ["ein hund ."] * 10 + [""])
    write(folder, "train.en", ["a dog ."] * 10 + ["orphan"])
    write(folder, "test.de", ["ein hund .", ""])
    write(folder, "test.en", ["a dog .", "nothing"])
    with pytest.warns(UserWarning, match="dropped 1 training pair"):
        dm = ParallelDataModule(None, "de", "en", data_dir=str(folder), min_freq=1)
    dm.setup("test")
    assert len(dm.datasets["train"]) == 10 and len(dm.datasets["test"]) == 2


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder: Path):
    """A local HTTP server on 127.0.0.1 serving ``folder``; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: QuietHandler(*a, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def check_fetch(source: Path, remote: Remote, tmp_path: Path, capsys, monkeypatch) -> None:
    """Download ``remote``'s files as served from a copy of ``source`` (sha256 verified), then once
    more with one of them tampered with: the corrupt file is deleted and named."""
    served = tmp_path / "served"
    served.mkdir()
    for name in remote.sha256:
        (served / name).write_bytes((source / name).read_bytes())
    monkeypatch.setitem(SOURCES, "multi30k", remote)
    with contextlib.contextmanager(serve)(served) as url:
        fetch("multi30k", str(tmp_path / "root"), url)
        folder = tmp_path / "root" / "multi30k"
        for name, digest in remote.sha256.items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
        with gzip.open(served / "val.en.gz", "wb") as handle:
            handle.write(b"tampered\n")
        (folder / "val.en.gz").unlink()
        with pytest.raises(ConfigError, match="failed the sha256 check"):
            fetch("multi30k", str(tmp_path / "root"), url)
    assert "MISMATCH" in capsys.readouterr().out
    assert not (folder / "val.en.gz").exists() and not (folder / "val.en.gz.part").exists()


def test_fetch_verifies_sha256_and_deletes_a_corrupt_file(tmp_path, capsys, monkeypatch):
    source = FIXTURES / "multi30k"
    remote = Remote("unused", {p.name: sha256_of(p) for p in sorted(source.glob("*.gz"))})
    check_fetch(source, remote, tmp_path, capsys, monkeypatch)


@pytest.mark.corpus
def test_fetch_of_the_real_multi30k_files_matches_the_recorded_sums(real_corpus, tmp_path, capsys, monkeypatch):
    check_fetch(real_corpus("multi30k"), SOURCES["multi30k"], tmp_path, capsys, monkeypatch)


def test_a_training_cap_in_words_drops_long_pairs_before_subwords_and_keeps_the_vocabulary():
    kwargs = dict(corpus="bible_en_es", src_lang="en", trg_lang="es", tokenizer="bpe", vocab_size=300, max_length=80)
    capped, full = ParallelDataModule(**kwargs, train_max_words=12), ParallelDataModule(**kwargs)
    capped.setup(), full.setup()
    src, trg = capped.text["train"]
    short = [max(len(s.split()), len(t.split())) <= 12 for s, t in zip(src, trg)]
    assert 0 < sum(short) < len(short)  # the fixture has pairs on both sides of the cap
    assert len(capped.datasets["train"]) == sum(short) and len(full.datasets["train"]) == len(short)
    kept = [e.src for e, k in zip(full.datasets["train"].examples, short) if k]
    assert [e.src for e in capped.datasets["train"].examples] == kept  # the same pairs, the same pieces
    assert capped.src_vocab == full.src_vocab and capped.trg_vocab == full.trg_vocab
    assert len(capped.datasets["val"]) == len(full.datasets["val"])  # evaluation keeps every line
    assert capped.train_max_length == 12 and full.train_max_length is None  # buckets beyond 12 words: extrapolation
