"""Parallel text on disk: ``{split}.{lang}`` files (plain or ``.gz``) and named corpora.

The data root comes from the config (``data_root``), else the environment
variable ``S2S_DATA_ROOT``, else ``~/.cache/seq2seq_attn/data``; tests and CI
point it at ``../shared/data``.
"""

import gzip
import os
import zlib
from pathlib import Path
from typing import NamedTuple, Optional

from seq2seq_attn.errors import ConfigError


class Corpus(NamedTuple):
    languages: tuple[str, ...]
    splits: dict[str, str]  # our split name -> the file prefix


CORPORA: dict[str, Corpus] = {
    "multi30k": Corpus(("en", "de", "fr"), {"train": "train", "val": "val", "test": "test_2016_flickr"}),
    "bible_en_es": Corpus(("en", "es"), {"train": "train", "val": "dev", "test": "test"}),
}


def data_root(configured: Optional[str] = None) -> Path:
    root = configured or os.environ.get("S2S_DATA_ROOT") or Path.home() / ".cache" / "seq2seq_attn" / "data"
    return Path(root).expanduser()


def corpus_dir(corpus: Optional[str], data_dir: Optional[str], root: Optional[str]) -> Path:
    if data_dir:
        return Path(data_dir).expanduser()
    if corpus not in CORPORA:
        raise ConfigError(f"unknown corpus {corpus!r}: choose one of {sorted(CORPORA)}, or set data_dir to a folder")
    return data_root(root) / corpus


def find_file(folder: Path, prefix: str, lang: str) -> Path:
    for name in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz"):
        if (folder / name).is_file():
            return folder / name
    hint = f" (run: seq2seq-attn data fetch {folder.name})" if folder.name in ("multi30k", "bible_en_es") else ""
    raise ConfigError(f"missing file {folder / prefix}.{lang}[.gz]: check the split, language and data root{hint}")


def read_lines(path: Path) -> list[str]:
    """All lines, without their line ends; invalid UTF-8 names the file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # a download or build cut short, or not gzip at all
        hint = f"seq2seq-attn data fetch {path.parent.name}" if path.parent.name in CORPORA else "copy it again"
        raise ConfigError(f"{path} is a truncated or corrupt gzip file ({err}): delete it and run {hint}") from err
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"{path}: line {number} is not valid UTF-8 ({err.reason}): re-encode the file as UTF-8"
            ) from err
    return out


def read_parallel(src_path: Path, trg_path: Path) -> tuple[list[str], list[str]]:
    src, trg = read_lines(src_path), read_lines(trg_path)
    if len(src) != len(trg):
        raise ConfigError(
            f"parallel files differ in length: {src_path} has {len(src)} lines, {trg_path} has {len(trg)}: "
            "line i of each must translate each other"
        )
    if not src:
        raise ConfigError(f"{src_path} and {trg_path} are empty: a split needs at least one sentence pair")
    return src, trg
