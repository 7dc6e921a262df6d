"""Reading the two SWORD Bible modules behind ``bible_en_es``: module checks, markup, verses.

The corpus pairs the World English Bible (module ``engWEB2015eb``, Debian package
``sword-text-web``) with the Reina-Valera 1909 (``spaRV1909eb``, ``sword-text-sparv``),
both read with pysword. ``bible_build.py`` aligns and writes them.
"""

import functools
import re
from pathlib import Path
from typing import Any, NamedTuple, Optional

from seq2seq_attn.data.bible_align import Verse
from seq2seq_attn.errors import ConfigError


class Module(NamedTuple):
    name: str
    lang: str
    package: str  # the Debian package that installs it


MODULES = {
    "en": Module("engWEB2015eb", "en", "sword-text-web"),
    "es": Module("spaRV1909eb", "es", "sword-text-sparv"),
}
DEBIAN_SWORD = Path("/usr/share/sword")
INSTALL_HINT = "apt-get install sword-text-web sword-text-sparv, or pass --modules DIR (with mods.d/ and modules/)"

# the 66 books in canonical (KJV) order, with their chapter counts: the split is by chapter index
BOOKS = (
    "Gen Exod Lev Num Deut Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps Prov Eccl Song Isa Jer "
    "Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Matt Mark Luke John Acts Rom 1Cor 2Cor Gal "
    "Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet 2Pet 1John 2John 3John Jude Rev"
).split()
CHAPTERS = tuple(
    int(n)
    for n in (
        "50 40 27 36 34 24 21 4 31 24 22 25 29 36 10 13 10 42 150 31 12 8 66 52 5 48 12 14 3 9 1 4 7 3 3 3 2 14 4 "
        "28 16 24 21 28 16 16 13 6 6 4 4 5 3 6 4 3 1 13 5 5 3 5 1 1 1 22"
    ).split()
)

GAP = "\x00"  # where a note or an added-words mark stood: a space unless punctuation follows
AFTER_CHAPTER_END = re.compile(r"<chapter\b[^>]*\beID=.*", re.S)  # book ends, the WEB glossary
NOTE_OR_ADDED = re.compile(r"<note\b[^>]*>.*?</note>|</?transChange\b[^>]*>", re.S)
HEADING = re.compile(r"<(title|speaker)\b(?![^>]*canonical=\"true\")[^>]*>.*?</\1>", re.S)
TAG = re.compile(r"<[^>]*>")
GAP_BEFORE_CLOSER = re.compile(GAP + r"+(?=[,.;:?!”’)\]])")
GAP_AFTER_OPENER = re.compile(r"(?<=[(“‘¿¡\[])" + GAP + "+")
# the subscriptions the 1909 text adds after an epistle's last "Amén." ("Fué escrita de Roma ...")
COLOPHON = re.compile(r"(?<=Amén\.)\s+(?!.*Amén\.)(?=.*\b(?:escrit|enviad)a\b).+$", re.S | re.I)


def split_of(chapter_index: int) -> str:
    """The split of a chapter, by its 0-based index over the 66 books."""
    return "dev" if chapter_index % 20 == 10 else "test" if chapter_index % 20 == 19 else "train"


@functools.cache
def chapter_index(book: str, chapter: int) -> int:
    book_at = BOOKS.index(book)
    return sum(CHAPTERS[:book_at]) + chapter - 1


def visible_markup(raw: str) -> str:
    """OSIS of a verse without what is not verse text: notes, headings, what follows the chapter's end."""
    markup = AFTER_CHAPTER_END.sub("", raw)
    return HEADING.sub("", NOTE_OR_ADDED.sub(GAP, markup))


def clean_text(raw: str) -> str:
    """Plain verse text from OSIS markup: canonical titles kept, notes and headings gone, spaces normalised."""
    text = TAG.sub("", visible_markup(raw))
    text = GAP_AFTER_OPENER.sub("", GAP_BEFORE_CLOSER.sub("", text)).replace(GAP, " ")
    return " ".join(text.split())


def strip_colophon(text: str) -> str:
    return COLOPHON.sub("", text)


def read_conf(path: Path) -> dict[str, str]:
    """A SWORD ``.conf`` file as {key (lower case): value}, plus "name" (the [section])."""
    conf = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            conf["name"] = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            conf.setdefault(key.strip().lower(), value.strip())
    return conf


def check_modules(folder: Path) -> dict[str, dict[str, str]]:
    """The conf of each module the corpus needs, by language; one-line errors for what is missing or wrong."""
    if not (folder / "mods.d").is_dir():
        raise ConfigError(f"no SWORD modules in {folder} (no mods.d/ folder): {INSTALL_HINT}")
    confs = {c.get("name", ""): c for c in map(read_conf, sorted((folder / "mods.d").glob("*.conf")))}
    found = {}
    for lang, module in MODULES.items():
        conf = confs.get(module.name)
        if conf is None:
            raise ConfigError(f"SWORD module {module.name} is not in {folder}/mods.d: {INSTALL_HINT}")
        if conf.get("lang", "").split("-")[0].lower() != lang:
            raise ConfigError(
                f"SWORD module {module.name} in {folder} is in language {conf.get('lang', '(no Lang=)')!r}, "
                f"not {lang!r}: install {module.package} or fix the folder given to --modules"
            )
        found[lang] = conf
    return found


def default_modules_dir(modules: Optional[str]) -> Path:
    return Path(modules).expanduser() if modules else DEBIAN_SWORD


def open_bible(folder: Path, name: str) -> Any:
    """A pysword bible for module ``name``; its decompressed book blocks are cached (pysword re-inflates per verse)."""
    try:
        from pysword.modules import SwordModules
    except ImportError as err:
        raise ConfigError("pysword is not installed: pip install pysword (or pip install seq2seq-attn[bible])") from err
    modules = SwordModules(str(folder))
    modules.parse_modules()
    try:
        bible = modules.get_bible_from_module(name)
    except (OSError, KeyError, ValueError) as err:
        raise ConfigError(f"cannot read SWORD module {name} in {folder} ({err}): {INSTALL_HINT}") from err
    if hasattr(bible, "_decompressed_text"):
        bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)
    return bible


def read_verses(folder: Path, name: str) -> dict[str, list[Verse]]:
    """The non-empty verses of each of the 66 books, clean, in the module's own numbering."""
    bible = open_bible(folder, name)
    structure = {b.osis_name: b for books in bible.get_structure().get_books().values() for b in books}
    out: dict[str, list[Verse]] = {}
    for osis in BOOKS:
        book, verses = structure.get(osis), []
        for chapter, count in enumerate(book.chapter_lengths if book else [], start=1):
            for number in range(1, count + 1):
                raw = bible.get(books=[osis], chapters=[chapter], verses=[number], clean=False)
                text = clean_text(raw)
                if text:
                    verses.append(Verse(f"{osis}.{chapter}.{number}", text))
        if verses:
            verses[-1] = verses[-1]._replace(text=strip_colophon(verses[-1].text))
        out[osis] = verses
    return out
