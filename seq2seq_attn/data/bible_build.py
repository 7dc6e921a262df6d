"""Building ``bible_en_es`` from the SWORD modules: align, filter, split by chapter, write atomically.

    seq2seq-attn data fetch bible_en_es [--root DIR] [--modules DIR]

Writes ``{train,dev,test}.{en,es,ref}.gz``, ``realigned_or_dropped.tsv.gz`` and
``PROVENANCE.md`` (counts, sha256 of every file). Everything is built in a temporary
folder beside the target and renamed into place, so an interrupted build leaves no
partial corpus; gzip headers carry no time or name, so a rebuild is byte-identical.
"""

import gzip
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple, Optional

from seq2seq_attn.data.bible import MODULES, chapter_index, check_modules, default_modules_dir, read_verses, split_of
from seq2seq_attn.data.bible_align import Bead, Verse, align, learn_lexicon, length_ratio_ok
from seq2seq_attn.errors import ConfigError

SPLITS = ("train", "dev", "test")
LOG_NAME = "realigned_or_dropped.tsv.gz"


class Pair(NamedTuple):
    ref: str  # "EN_REF|ES_REF", merged verses joined by "+"
    en: str
    es: str


class Corpus(NamedTuple):
    splits: dict[str, list[Pair]]
    log: list[str]  # tab-separated rows: bead, en_ref, es_ref, en, es


def bead_refs(bead: Bead) -> tuple[str, str]:
    return "+".join(v.ref for v in bead.en), "+".join(v.ref for v in bead.es)


def same_ref_pairs(books: dict[str, tuple[list[Verse], list[Verse]]]) -> list[tuple[str, str]]:
    pairs = []
    for en, es in books.values():
        spanish = {v.ref: v.text for v in es}
        pairs += [(v.text, spanish[v.ref]) for v in en if v.ref in spanish]
    return pairs


def assemble(books: dict[str, tuple[list[Verse], list[Verse]]]) -> Corpus:
    """Align each book and sort its pairs into splits; log every bead that is not a kept by-reference pair."""
    splits: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    log = ["bead\ten_ref\tes_ref\ten\tes"]
    lexicon = learn_lexicon(same_ref_pairs(books))
    for book, (en, es) in books.items():
        try:
            beads = align(en, es, lexicon)
        except ValueError as err:
            raise ConfigError(f"cannot align the book {book}: {err}; are these the expected module versions?") from err
        for bead in beads:
            en_ref, es_ref = bead_refs(bead)
            en_text, es_text = " ".join(v.text for v in bead.en), " ".join(v.text for v in bead.es)
            kind = bead.kind
            if bead.en and bead.es and not length_ratio_ok(en_text, es_text):
                kind += " dropped:len-ratio>2"
            elif bead.en and bead.es:
                _, chapter, _ = bead.en[0].ref.split(".")
                splits[split_of(chapter_index(book, int(chapter)))].append(Pair(f"{en_ref}|{es_ref}", en_text, es_text))
                if bead.by_reference:
                    continue
            log.append("\t".join((kind, en_ref, es_ref, en_text, es_text)))
    return Corpus(splits, log)


def gzip_lines(path: Path, lines: list[str]) -> None:
    # mtime=0 and no file name in the header: the same lines give the same bytes
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"), mtime=0))


def sha256_bytes(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_corpus(folder: Path, corpus: Corpus, confs: dict[str, dict[str, str]]) -> None:
    for split, pairs in corpus.splits.items():
        for field in ("en", "es", "ref"):
            gzip_lines(folder / f"{split}.{field}.gz", [getattr(p, field) for p in pairs])
    gzip_lines(folder / LOG_NAME, corpus.log)
    (folder / "PROVENANCE.md").write_text(provenance(folder, corpus, confs), encoding="utf-8")


def provenance(folder: Path, corpus: Corpus, confs: dict[str, dict[str, str]]) -> str:
    sources = "\n".join(
        f"- `{m.name}` ({confs[lang].get('description', '?')}, version {confs[lang].get('version', '?')}; "
        f"Debian package `{m.package}`), read with pysword"
        for lang, m in MODULES.items()
    )
    counts = "\n".join(f"| {s} | {len(pairs)} |" for s, pairs in corpus.splits.items())
    files = []
    for path in sorted(folder.glob("*.gz")):
        lines = gzip.decompress(path.read_bytes()).count(b"\n")
        files.append(f"| {path.name} | {path.stat().st_size} | {lines} | {sha256_bytes(path)} |")
    return PROVENANCE.format(sources=sources, log=LOG_NAME, counts=counts, files="\n".join(files))


PROVENANCE = """\
# Bible, English (derived from the World English Bible) / Spanish (Reina-Valera 1909), verse-aligned

Built by `seq2seq-attn data fetch bible_en_es`. One verse (rarely two merged) per line, UTF-8,
untokenized; line i of `{{split}}.en.gz` and `{{split}}.es.gz` translate each other, and
`{{split}}.ref.gz` gives `EN_REF|ES_REF` (OSIS, e.g. `Gen.1.1|Gen.1.1`).

## Origin
{sources}

Markup, notes, non-canonical headings and the Spanish epistles' subscriptions removed. Verses are
paired by reference where the numberings agree, else by a dynamic program over word associations
and length; pairs whose word counts differ over 2x (the longer side 10+ words) are dropped. Every
re-aligned, merged or dropped verse is listed in `{log}`. Whole chapters go to one split: chapter
index i (from 0, over the 66 books in canonical order): i % 20 == 10 dev, i % 20 == 19 test, else train.
Both texts are public domain; "World English Bible" is a trademark of eBible.org for the unchanged text.

## Splits
| split | pairs |
|---|---|
{counts}

## Files
| file | bytes | lines | sha256 |
|---|---|---|---|
{files}
"""


def replace_folder(built: Path, target: Path) -> None:
    """Move ``built`` to ``target``; an old ``target`` is moved aside first and deleted after."""
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    built.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def build(target: Path, modules: Optional[str] = None) -> Path:
    """Build the corpus from the SWORD modules in ``modules`` (default: the Debian folder) into ``target``."""
    start = time.perf_counter()
    folder = default_modules_dir(modules)
    confs = check_modules(folder)
    verses = {lang: read_verses(folder, m.name) for lang, m in MODULES.items()}
    corpus = assemble({book: (verses["en"][book], verses["es"][book]) for book in verses["en"]})
    if not corpus.splits["train"]:
        raise ConfigError(f"the SWORD modules in {folder} gave no verse pairs: {MODULES['en'].name} may be empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*target.parent.glob(f".{target.name}.building-*"), *target.parent.glob(f".{target.name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)  # left by a killed build
    work = target.with_name(f".{target.name}.building-{os.getpid()}")
    work.mkdir()
    try:
        write_corpus(work, corpus, confs)
        replace_folder(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = ", ".join(f"{s} {len(p)}" for s, p in corpus.splits.items())
    print(f"built    {target}: {sizes} pairs, {len(corpus.log) - 1} logged beads ({time.perf_counter() - start:.0f} s)")
    return target
