"""Verse alignment across two versification traditions: a banded dynamic program.

Verses pair by reference where the two texts agree. Where the Spanish text moves
a verse boundary (Num 13, Job 39-41, ...), the dynamic program follows the content
instead: it scores 1-1, 2-1 and 1-2 beads by word associations (learnt from the
verses whose references agree) and length, and may leave a verse out (1-0, 0-1)
when nothing on the other side fits it. The modules' Strong's numbers are not
used: in the WEB Psalms they follow the Hebrew numbering, one verse off the text.
"""

import math
import re
from collections import Counter
from typing import NamedTuple

BEADS = ((1, 1), (2, 1), (1, 2), (1, 0), (0, 1))
BAND = 8  # how far (in verses) an alignment may stray from the reference-based one
SAME_REF_BONUS = 0.2  # a tie-break towards the references where content says little
SKIP_COST = 0.5  # per verse left out
MERGE_COST = 0.1  # per 2-1 or 1-2 bead, on top of its content cost
LENGTH_WEIGHT = 0.3  # share of the length term in a bead's cost
MAX_DF = 0.15  # words in more verses than this share carry no alignment signal ("the", "y")
MIN_DICE = 0.2  # weakest verse-level association kept in the lexicon
WORD = re.compile(r"\w+")


class Verse(NamedTuple):
    ref: str  # OSIS, e.g. "Gen.1.1"
    text: str  # clean, whitespace-normalised


class Bead(NamedTuple):
    en: tuple[Verse, ...]
    es: tuple[Verse, ...]

    @property
    def kind(self) -> str:
        return f"{len(self.en)}-{len(self.es)}"

    @property
    def by_reference(self) -> bool:
        """A 1-1 bead whose two verses carry the same reference: not a re-alignment."""
        return len(self.en) == len(self.es) == 1 and self.en[0].ref == self.es[0].ref


def dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 0.0


def words(text: str) -> frozenset[str]:
    return frozenset(WORD.findall(text.lower()))


def learn_lexicon(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """English word -> the Spanish word most associated with it (Dice over verse pairs, at least MIN_DICE)."""
    en_words, es_words = [words(e) for e, _ in pairs], [words(s) for _, s in pairs]
    en_df, es_df = Counter(w for ws in en_words for w in ws), Counter(w for ws in es_words for w in ws)
    most = MAX_DF * len(pairs)
    together: Counter = Counter()
    for en, es in zip(en_words, es_words):
        es_kept = [w for w in es if 2 <= es_df[w] <= most]
        together.update((e, s) for e in en if 2 <= en_df[e] <= most for s in es_kept)
    best: dict[str, tuple[float, str]] = {}
    for (e, s), count in together.items():
        score = 2 * count / (en_df[e] + es_df[s])
        if count >= 2 and score >= MIN_DICE and score > best.get(e, (0.0, ""))[0]:
            best[e] = (score, s)
    return {e: s for e, (_, s) in sorted(best.items())}


class Side(NamedTuple):
    """What the cost sees of a verse: its length and its associated words, in Spanish."""

    chars: int
    keys: frozenset[str]


def bead_cost(en: list[Side], es: list[Side], same_ref: bool, log_ratio: float) -> float:
    """Cost of pairing ``en`` with ``es`` (both non-empty), scaled by the verses it covers.

    Args:
        log_ratio: the book's log(Spanish chars / English chars), the expected length ratio.
    """
    en_chars, es_chars = sum(v.chars for v in en), sum(v.chars for v in es)
    length = min(1.0, abs(math.log((es_chars + 1) / (en_chars + 1)) - log_ratio))
    overlap = dice(frozenset().union(*(v.keys for v in en)), frozenset().union(*(v.keys for v in es)))
    cost = (1 - LENGTH_WEIGHT) * (1 - overlap) + LENGTH_WEIGHT * length - (SAME_REF_BONUS if same_ref else 0.0)
    return cost * (len(en) + len(es)) / 2 + (MERGE_COST if len(en) + len(es) == 3 else 0.0)


def band_centres(en: list[Verse], es: list[Verse]) -> list[int]:
    """For each English position 0..len(en), the Spanish position the references suggest."""
    where = {v.ref: j for j, v in enumerate(es)}
    centres, last = [], 0
    for verse in en:
        last = where.get(verse.ref, last)
        centres.append(last)
        last += 1
    return centres + [len(es)]


def expected_log_ratio(en: list[Verse], es: list[Verse]) -> float:
    """log(Spanish chars / English chars) over the verses whose references both texts have."""
    spanish = {v.ref: len(v.text) for v in es}
    both = [(len(v.text), spanish[v.ref]) for v in en if v.ref in spanish]
    if not both:  # no reference in common: the whole lists
        both = [(sum(len(v.text) for v in en), sum(len(v.text) for v in es))]
    return math.log((sum(s for _, s in both) + 1) / (sum(e for e, _ in both) + 1))


def align(en: list[Verse], es: list[Verse], lexicon: dict[str, str]) -> list[Bead]:
    """Monotone alignment of two verse lists of one book; every verse is in exactly one bead."""
    targets = frozenset(lexicon.values())
    en_sides = [Side(len(v.text), frozenset(lexicon[w] for w in words(v.text) if w in lexicon)) for v in en]
    es_sides = [Side(len(v.text), words(v.text) & targets) for v in es]
    log_ratio = expected_log_ratio(en, es)
    centres = band_centres(en, es)
    cost: dict[tuple[int, int], float] = {(0, 0): 0.0}
    back: dict[tuple[int, int], tuple[int, int]] = {}
    for i in range(len(en) + 1):
        for j in range(max(0, centres[i] - BAND), min(len(es), centres[i] + BAND) + 1):
            best, step = math.inf, None
            for di, dj in BEADS:
                prev = cost.get((i - di, j - dj))
                if prev is None:
                    continue
                if di and dj:
                    same_ref = di == dj == 1 and en[i - 1].ref == es[j - 1].ref
                    prev += bead_cost(en_sides[i - di : i], es_sides[j - dj : j], same_ref, log_ratio)
                else:
                    prev += SKIP_COST
                if prev < best:
                    best, step = prev, (di, dj)
            if step is not None:
                cost[i, j], back[i, j] = best, step
    if (len(en), len(es)) not in cost:
        raise ValueError(f"no alignment within {BAND} verses of the references: the texts differ too much")
    return trace(en, es, back)


def trace(en: list[Verse], es: list[Verse], back: dict[tuple[int, int], tuple[int, int]]) -> list[Bead]:
    beads, i, j = [], len(en), len(es)
    while (i, j) != (0, 0):
        di, dj = back[i, j]
        beads.append(Bead(tuple(en[i - di : i]), tuple(es[j - dj : j])))
        i, j = i - di, j - dj
    return beads[::-1]


def length_ratio_ok(en: str, es: str, limit: float = 2.0, min_words: int = 10) -> bool:
    """False when one side has over ``limit`` times the other's words (and the longer has ``min_words``+)."""
    n_en, n_es = len(en.split()), len(es.split())
    return max(n_en, n_es) < min_words or max(n_en, n_es) <= limit * min(n_en, n_es)
