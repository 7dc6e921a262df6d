"""Writes the small fixture corpora under ``tests/data/corpora`` (run from the repository root).

    python tests/data/make_corpora.py

Generated text, not excerpts of the real corpora: a seeded template grammar with one
lexicon per language, so that line i of each language file translates line i of the
others word for word, with language-specific word order for adjectives. The folders and
file names mirror the real ``multi30k`` and ``bible_en_es`` corpora, so every config and
pipeline test runs on a fresh clone; tests marked ``corpus`` read the real ones.
"""

import gzip
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent / "corpora"

# en, de, fr, es
DETERMINERS = [("a", "ein", "un", "un"), ("the", "der", "le", "el")]
NOUNS = [
    ("man", "Mann", "homme", "hombre"), ("dog", "Hund", "chien", "perro"), ("boy", "Junge", "garçon", "niño"),
    ("worker", "Arbeiter", "ouvrier", "obrero"), ("horse", "Hengst", "cheval", "caballo"),
    ("king", "König", "roi", "rey"), ("shepherd", "Hirte", "berger", "pastor"), ("child", "Sohn", "fils", "hijo"),
]  # fmt: skip
ADJECTIVES = [
    ("young", "junge", "jeune", "joven"), ("old", "alte", "vieux", "viejo"), ("tall", "große", "grand", "alto"),
    ("small", "kleine", "petit", "pequeño"), ("happy", "fröhliche", "heureux", "feliz"),
]  # fmt: skip
VERBS = [
    ("walks", "geht", "marche", "camina"), ("runs", "läuft", "court", "corre"),
    ("sits", "sitzt", "est assis", "se sienta"), ("sleeps", "schläft", "dort", "duerme"),
    ("waits", "wartet", "attend", "espera"), ("sings", "singt", "chante", "canta"),
]  # fmt: skip
PLACES = [
    ("on the street", "auf der Straße", "dans la rue", "en la calle"),
    ("in the park", "im Park", "dans le parc", "en el parque"),
    ("near the water", "am Wasser", "près de l'eau", "cerca del agua"),
    ("in the city", "in der Stadt", "dans la ville", "en la ciudad"),
    ("on the mountain", "auf dem Berg", "sur la montagne", "en el monte"),
    ("by the river", "am Fluss", "au bord du fleuve", "junto al río"),
]  # fmt: skip
AND = ("and", "und", "et", "y")
LANGS = {"en": 0, "de": 1, "fr": 2, "es": 3}


def clause(rng: random.Random) -> tuple[str, ...]:
    det, noun, verb, place = (rng.choice(x) for x in (DETERMINERS, NOUNS, VERBS, PLACES))
    adj = rng.choice(ADJECTIVES) if rng.random() < 0.5 else None
    out = []
    for i in range(4):
        if adj is None:
            words = [det[i], noun[i]]
        elif i in (2, 3):  # French and Spanish put these adjectives after the noun
            words = [det[i], noun[i], adj[i]]
        else:
            words = [det[i], adj[i], noun[i]]
        out.append(" ".join([*words, verb[i], place[i]]))
    return tuple(out)


def sentence(rng: random.Random, clauses: int) -> tuple[str, ...]:
    parts = [clause(rng) for _ in range(clauses)]
    text = [f" {AND[i]} ".join(p[i] for p in parts) + " ." for i in range(4)]
    return tuple(t[0].upper() + t[1:] for t in text)


def write(folder: Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    (folder / name).write_bytes(gzip.compress(data, mtime=0))


def corpus(name: str, langs: tuple[str, ...], splits: dict[str, int], max_clauses: int, seed: int) -> None:
    rng = random.Random(seed)
    for split, count in splits.items():
        pairs = [sentence(rng, rng.randint(1, max_clauses)) for _ in range(count)]
        for lang in langs:
            write(OUT / name, f"{split}.{lang}.gz", [p[LANGS[lang]] for p in pairs])


def main() -> None:
    # short sentences (1-2 clauses, 5-19 words), like Multi30k's captions
    corpus("multi30k", ("en", "de", "fr"), {"train": 300, "val": 40, "test_2016_flickr": 40}, 2, seed=1)
    # long ones (1-9 clauses, up to about 80 words), like Bible verses: every length bucket has sentences
    corpus("bible_en_es", ("en", "es"), {"train": 300, "dev": 40, "test": 40}, 9, seed=2)


if __name__ == "__main__":
    main()
