"""bible_en_es builder: markup cleaning, verse alignment, chapter splits, atomic writes, errors, and the
acceptance check against a full corpus (marked ``corpus``)."""

import gzip
import struct
import sys
import zlib
from pathlib import Path

import pytest

from seq2seq_attn.cli import main
from seq2seq_attn.data import bible_build
from seq2seq_attn.data.bible import (
    BOOKS,
    CHAPTERS,
    DEBIAN_SWORD,
    MODULES,
    chapter_index,
    check_modules,
    clean_text,
    split_of,
    strip_colophon,
)
from seq2seq_attn.data.bible_align import Verse, align, learn_lexicon, length_ratio_ok
from seq2seq_attn.data.bible_build import build
from seq2seq_attn.errors import ConfigError

# --- markup ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, text",
    [
        ('<w lemma="strong:H0430">God</w><note placement="foot">Hebrew “Elohim”.</note><w>created</w> it.',
         "God created it."),
        ('since it is incomprehensible<note placement="foot">or, wonderful</note>?”', "since it is incomprehensible?”"),
        ('hay allí<transChange type="added">también</transChange><w lemma="strong:H0916">bdelio</w>',
         "hay allí también bdelio"),
        ('<title canonical="true" type="psalm">A Psalm by David.</title> <l level="1" sID="a"/>Yahweh,<l eID="a"/>',
         "A Psalm by David. Yahweh,"),
        ('<title type="section">The Fall</title><speaker>Beloved</speaker> <lg sID="g"/>Let him kiss me',
         "Let him kiss me"),
        ('saints. Amen.  <chapter eID="Rev.22"/><div type="glossary"/><title>Glossary</title> Abaddon is ...',
         "saints. Amen."),
        ("  many\n\tspaces   here ", "many spaces here"),
    ],
)  # fmt: skip
def test_clean_text_strips_markup_notes_and_headings(raw, text):
    assert clean_text(raw) == text


def test_colophon_after_the_last_amen_is_removed_and_other_text_kept():
    assert strip_colophon("La gracia sea con vosotros. Amén. Escrita de Roma á los Colosenses.") == (
        "La gracia sea con vosotros. Amén."
    )
    kept = "Y dijo todo el pueblo: Amén. Y alabó á Jehová."
    assert strip_colophon(kept) == kept


# --- alignment ------------------------------------------------------------------------------------------


def verses(*pairs: tuple[str, str]) -> list[Verse]:
    return [Verse(ref, text) for ref, text in pairs]


LEXICON = {
    "people": "pueblo", "hazeroth": "haseroth", "paran": "parán", "yahweh": "jehová", "moses": "moisés",
    "spoke": "habló", "men": "hombres", "land": "tierra", "canaan": "canaán", "aaron": "aarón", "pharaoh": "faraón",
    "egypt": "egipto", "went": "fueron",
}  # fmt: skip


def test_align_follows_content_across_a_numbering_shift():
    en = verses(
        ("Num.12.16", "Afterward the people traveled from Hazeroth and encamped in the wilderness of Paran."),
        ("Num.13.1", "Yahweh spoke to Moses, saying,"),
        ("Num.13.2", "Send men, that they may spy out the land of Canaan."),
    )
    es = verses(
        ("Num.13.1", "Y después movió el pueblo de Haseroth, y asentaron el campo en el desierto de Parán."),
        ("Num.13.2", "Y Jehová habló á Moisés, diciendo:"),
        ("Num.13.3", "Envía tú hombres que reconozcan la tierra de Canaán."),
    )
    beads = align(en, es, LEXICON)
    assert [(b.en[0].ref, b.es[0].ref) for b in beads] == [
        ("Num.12.16", "Num.13.1"), ("Num.13.1", "Num.13.2"), ("Num.13.2", "Num.13.3")
    ]  # fmt: skip
    assert all(b.kind == "1-1" and not b.by_reference for b in beads)


def test_align_merges_two_verses_that_one_verse_translates():
    en = verses(
        ("Exod.5.1", "Moses and Aaron went to the people of the land."),
        ("Exod.5.2", "Afterward Moses and Aaron went"),
        ("Exod.5.3", "to Pharaoh, the king of Egypt."),
        ("Exod.5.4", "Yahweh spoke to Moses in the land of Canaan."),
    )
    es = verses(
        ("Exod.5.1", "Moisés y Aarón fueron al pueblo de la tierra."),
        ("Exod.5.2", "Y después Moisés y Aarón fueron á Faraón, rey de Egipto."),
        ("Exod.5.3", "Y Jehová habló á Moisés en la tierra de Canaán."),
    )
    beads = align(en, es, LEXICON)
    assert [b.kind for b in beads] == ["1-1", "2-1", "1-1"]
    assert [v.ref for v in beads[1].en] == ["Exod.5.2", "Exod.5.3"] and beads[2].es[0].ref == "Exod.5.3"


def test_align_keeps_references_where_they_agree_and_skips_a_verse_with_no_counterpart():
    en = verses(("Acts.8.36", "Moses spoke to the people."), ("Acts.8.38", "Aaron went to Egypt."))
    es = verses(
        ("Acts.8.36", "Moisés habló al pueblo."),
        ("Acts.8.37", "Y Felipe dijo: Si crees de todo corazón, bien puedes. Y la tierra de Canaán respondió."),
        ("Acts.8.38", "Aarón fué á Egipto."),
    )
    beads = align(en, es, LEXICON)
    assert [b.kind for b in beads] == ["1-1", "0-1", "1-1"]
    assert beads[0].by_reference and beads[2].by_reference and beads[1].es[0].ref == "Acts.8.37"


def test_learn_lexicon_pairs_words_that_occur_in_the_same_verses():
    pairs = [("the lion and the king", "el león y el rey"), ("a lion roared", "un león rugió")] * 3
    pairs += [("the king spoke", "el rey habló")] * 3 + [(f"a filler {i}", f"el relleno {i}") for i in range(9)]
    pairs += [(f"filler {i}", f"relleno {i}") for i in range(200)]
    lexicon = learn_lexicon(pairs)
    assert lexicon["lion"] == "león" and lexicon["king"] == "rey"


def test_length_ratio_drops_only_long_lopsided_pairs():
    assert length_ratio_ok("Hadoram, Uzal, Diklah,", "Y á Hadoram, y á Uzal, y á Dicla,")  # short: kept
    assert not length_ratio_ok("Parmashta, Arisai, Aridai, and Vaizatha,", "Y á P, y á A, y á A, y á V, y á X")
    assert length_ratio_ok("one two three four five six", "uno dos tres cuatro cinco seis siete ocho nueve diez")


# --- splits ---------------------------------------------------------------------------------------------


def test_chapter_split_counts_chapters_from_zero_over_the_66_books():
    assert len(BOOKS) == len(CHAPTERS) == 66 and sum(CHAPTERS) == 1189
    assert chapter_index("Gen", 1) == 0 and chapter_index("Exod", 1) == 50 and chapter_index("Rev", 22) == 1188
    assert split_of(chapter_index("Gen", 11)) == "dev" and split_of(chapter_index("Gen", 20)) == "test"
    assert [split_of(i) for i in (0, 9, 10, 11, 19, 20, 30, 39)] == [
        "train", "train", "dev", "train", "test", "train", "dev", "test"
    ]  # fmt: skip


def test_chapter_table_matches_pyswords_kjv_canon():
    canons = pytest.importorskip("pysword.canons").canons
    books = [b for testament in ("ot", "nt") for b in canons["kjv"][testament]]
    assert [b[1] for b in books] == BOOKS and [len(b[3]) for b in books] == list(CHAPTERS)


# --- a tiny SWORD folder --------------------------------------------------------------------------------


def write_conf(root: Path, name: str, lang: str) -> None:
    (root / "mods.d").mkdir(parents=True, exist_ok=True)
    (root / "mods.d" / f"{name.lower()}.conf").write_text(
        f"[{name}]\nDataPath=./modules/texts/ztext/{name}/\nModDrv=zText\nSourceType=OSIS\nEncoding=UTF-8\n"
        f"CompressType=ZIP\nBlockType=BOOK\nVersification=KJV\nLang={lang}\nDescription=test {name}\nVersion=1.0\n"
    )


def write_module(root: Path, name: str, lang: str, text: dict[str, str]) -> None:
    """A zText module (one zlib block, Old Testament only) that pysword reads like the Debian ones."""
    structure = pytest.importorskip("pysword.books").BibleStructure("kjv", ["ot"])
    write_conf(root, name, lang)
    records, block = {}, b""
    for ref, raw in text.items():
        book, chapter, verse = ref.split(".")
        [index] = structure.ref_to_indicies(books=[book], chapters=[int(chapter)], verses=[int(verse)])["ot"]
        records[index] = (len(block), len(raw.encode()))
        block += raw.encode()
    folder = root / "modules" / "texts" / "ztext" / name
    folder.mkdir(parents=True)
    compressed = zlib.compress(block)
    (folder / "ot.bzz").write_bytes(compressed)
    (folder / "ot.bzs").write_bytes(struct.pack("<III", 0, len(compressed), len(block)))
    (folder / "ot.bzv").write_bytes(
        b"".join(struct.pack("<IIH", 0, *records.get(i, (0, 0))) for i in range(max(records) + 1))
    )


ENGLISH = {
    "Gen.1.1": "<w>In the beginning</w>, God<note>“Elohim”</note>created the heavens and the earth.",
    "Gen.1.2": "The earth was formless and empty.",
    "Gen.11.1": "The whole earth was of one language.",
    "Gen.20.1": "Abraham traveled from there toward the land of the South.",
}
SPANISH = {
    "Gen.1.1": "EN el principio crió Dios los cielos y la tierra.",
    "Gen.1.2": "Y la tierra estaba desordenada y vacía.",
    "Gen.11.1": "ERA entonces toda la tierra de una lengua.",
    "Gen.20.1": "DE allí partió Abraham á la tierra del Mediodía.",
}


@pytest.fixture
def sword(tmp_path) -> Path:
    root = tmp_path / "sword"
    write_module(root, MODULES["en"].name, "en", ENGLISH)
    write_module(root, MODULES["es"].name, "es", SPANISH)
    return root


def lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode().splitlines()


def test_build_from_a_tiny_sword_folder_writes_every_split_reproducibly(sword, tmp_path, capsys):
    target = build(tmp_path / "data" / "bible_en_es", str(sword))
    assert lines(target / "train.ref.gz") == ["Gen.1.1|Gen.1.1", "Gen.1.2|Gen.1.2"]
    assert lines(target / "dev.en.gz") == ["The whole earth was of one language."]
    assert lines(target / "test.es.gz") == ["DE allí partió Abraham á la tierra del Mediodía."]
    assert lines(target / "train.en.gz")[0] == "In the beginning, God created the heavens and the earth."
    assert lines(target / "realigned_or_dropped.tsv.gz") == ["bead\ten_ref\tes_ref\ten\tes"]
    provenance = (target / "PROVENANCE.md").read_text()
    files = sorted(p.name for p in target.iterdir())
    assert len(files) == 11
    assert all(bible_build.sha256_bytes(target / f) in provenance for f in files if f.endswith(".gz"))
    before = {f: (target / f).read_bytes() for f in files}
    build(target, str(sword))  # replaces the existing folder
    assert {f: (target / f).read_bytes() for f in files} == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["bible_en_es"]


def test_a_build_that_fails_midway_leaves_no_partial_corpus(sword, tmp_path, monkeypatch):
    written, write = [], bible_build.gzip_lines

    def failing(path, rows):
        if len(written) == 3:
            raise OSError("disk full")
        written.append(path)
        write(path, rows)

    monkeypatch.setattr(bible_build, "gzip_lines", failing)
    target = tmp_path / "data" / "bible_en_es"
    (target.parent / ".bible_en_es.building-1").mkdir(parents=True)  # as a killed build leaves it
    with pytest.raises(OSError, match="disk full"):
        build(target, str(sword))
    assert len(written) == 3 and list(target.parent.iterdir()) == []
    target.mkdir()
    (target / "train.en.gz").write_bytes(b"old corpus")
    written.clear()
    with pytest.raises(OSError, match="disk full"):
        build(target, str(sword))
    assert [p.name for p in target.parent.iterdir()] == ["bible_en_es"]
    assert (target / "train.en.gz").read_bytes() == b"old corpus"


# --- errors ---------------------------------------------------------------------------------------------


def test_missing_modules_name_the_install_command(tmp_path):
    with pytest.raises(ConfigError, match="apt-get install sword-text-web sword-text-sparv.*--modules"):
        check_modules(tmp_path / "nowhere")
    write_conf(tmp_path, MODULES["en"].name, "en")
    with pytest.raises(ConfigError, match=f"{MODULES['es'].name} is not in .*apt-get install sword-text-web"):
        check_modules(tmp_path)


def test_a_module_without_its_data_files_is_an_error_naming_it(tmp_path):
    pytest.importorskip("pysword")
    write_conf(tmp_path, MODULES["en"].name, "en")
    write_conf(tmp_path, MODULES["es"].name, "es")
    with pytest.raises(ConfigError, match=f"cannot read SWORD module {MODULES['en'].name} .*apt-get install"):
        build(tmp_path / "out" / "bible_en_es", str(tmp_path))


@pytest.mark.parametrize("english_lang", ["es", "de"])
def test_a_module_in_the_wrong_language_is_named_with_the_language_found(tmp_path, english_lang):
    write_conf(tmp_path, MODULES["en"].name, english_lang)
    write_conf(tmp_path, MODULES["es"].name, "es")
    with pytest.raises(ConfigError, match=f"{MODULES['en'].name} .* in language '{english_lang}', not 'en'"):
        check_modules(tmp_path)


def test_missing_pysword_names_the_pip_command(tmp_path, monkeypatch):
    write_conf(tmp_path, MODULES["en"].name, "en")
    write_conf(tmp_path, MODULES["es"].name, "es")
    monkeypatch.setitem(sys.modules, "pysword", None)
    monkeypatch.setitem(sys.modules, "pysword.modules", None)
    with pytest.raises(ConfigError, match=r"pip install pysword \(or pip install seq2seq-attn\[bible\]\)"):
        build(tmp_path / "out" / "bible_en_es", str(tmp_path))


def test_cli_prints_one_line_error_and_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "fetch", "bible_en_es", "--root", str(tmp_path), "--modules", str(tmp_path / "none")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("error: ") and "\n" not in err
    assert "apt-get install sword-text-web sword-text-sparv" in err and not (tmp_path / "bible_en_es").exists()


# --- acceptance -----------------------------------------------------------------------------------------


def pairs(folder: Path, split: str) -> list[tuple[str, ...]]:
    columns = [lines(folder / f"{split}.{field}.gz") for field in ("ref", "en", "es")]
    return [tuple(" ".join(c.split()) for c in row) for row in zip(*columns)]


@pytest.mark.slow
@pytest.mark.corpus
def test_build_from_the_debian_modules_reproduces_the_shared_corpus(real_corpus, tmp_path):
    pytest.importorskip("pysword", reason="pip install pysword (or pip install seq2seq-attn[bible])")
    try:
        check_modules(DEBIAN_SWORD)
    except ConfigError:
        pytest.skip(f"needs the SWORD modules in {DEBIAN_SWORD}: apt-get install sword-text-web sword-text-sparv")
    shared = real_corpus("bible_en_es")
    built = build(tmp_path / "bible_en_es")
    for split in ("train", "dev"):
        mine, theirs = pairs(built, split), pairs(shared, split)
        assert abs(len(mine) - len(theirs)) <= 0.01 * len(theirs), f"{split}: {len(mine)} pairs vs {len(theirs)}"
        mine_set = set(mine)
        same = sum(pair in mine_set for pair in theirs)
        assert same >= 0.95 * len(theirs), f"{split}: {same} of {len(theirs)} shared pairs identical"
