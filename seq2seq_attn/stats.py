"""Corpus-level statistics a reviewer asks for: bootstrap confidence intervals and paired significance.

Both resample sentences, so they work on sacreBLEU's per-sentence sufficient statistics (n-gram
matches and lengths for BLEU, character and word n-gram counts for chrF): a resample's score is
computed from the sum of its sentences' statistics, exactly as sacreBLEU scores a corpus, without
re-reading any text. The resampling is our own, seeded, vectorised over resamples:

- :func:`bootstrap_interval`: the score with a percentile interval (Efron's bootstrap; Koehn 2004): the
  resamples sacreBLEU draws for the same seed (``numpy.random.default_rng(seed)``, 1,000 resamples) and the
  order statistics its ``estimate_ci`` reads (for 95%, the 25th and the 975th of 1,000), so its half-width
  is the ``± ci`` that ``sacrebleu --confidence`` prints (tested equal).
- :func:`ratio_interval`: one set's score as a multiple of another's (a length bucket's BLEU over the
  11-20-word bucket's: Fig. 2's question), the two resampled independently, with a percentile interval.
- :func:`paired_bootstrap`: Koehn's (2004) paired bootstrap resampling test, as sacreBLEU's
  ``--paired-bs`` does it: both systems are scored on the same resamples, the absolute
  differences are centred on their mean (the null hypothesis of no difference), and the p-value
  is the share of resamples whose centred difference reaches the observed one, with +1 smoothing.
  (sacreBLEU counts only those that exceed it, which gives two identical systems p = 1/(R+1);
  counting ties gives them p = 1. With no tie, which different systems practically never have, the
  p-value is sacreBLEU's on the same seed: tested equal.)

- :func:`approximate_randomization`: the paired approximate randomisation test (Noreen 1989; Riezler and
  Maxwell 2005), as sacreBLEU's ``--paired-ar`` does it: each trial swaps every sentence's outputs between
  the two systems with probability 1/2, and the p-value is the share of trials whose absolute difference
  reaches the observed one, with +1 smoothing (ties counted, as above; with none, sacreBLEU's p-value on
  the same seed and trials: tested equal).

The scorers take the column sums of the statistics, so the same resampling serves any metric
that is a function of summed per-sentence statistics (a mean is the simplest; tests use it).
"""

from typing import Callable, NamedTuple, Sequence

import numpy as np

SEED = 12345  # sacreBLEU's default resampling seed
RESAMPLES = 1000


Scorer = Callable[[np.ndarray], float]  # summed statistics (K,) -> the corpus score


# BLEU = brevity penalty × precision part. Its two factors, scored from BLEU's statistics, say why it falls:
# ``bleu_precision``, BLEU without its brevity penalty (the n-gram precisions' geometric mean, × 100), and
# ``length_ratio``, the hypotheses' length over the references' in BLEU's tokens (the brevity penalty's input).
BLEU_FACTORS = ("bleu_precision", "length_ratio")


def statistics_of(metric: str) -> str:
    """The sentence statistics (:func:`sentence_statistics`) a metric of :func:`text_scorer` is scored from."""
    return "bleu" if metric in BLEU_FACTORS else metric


def text_scorer(metric: str) -> Scorer:
    """sacreBLEU's corpus BLEU or chrF (default settings) of summed sentence statistics, or one of BLEU's factors
    (:data:`BLEU_FACTORS`) of summed BLEU statistics ``(hyp_len, ref_len, matches 1-4, totals 1-4)``."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.utils import my_log

    def precision_part(bleu) -> float:  # sacreBLEU's formula less the penalty; 0 without a match
        return float(np.exp(np.mean([my_log(p) for p in bleu.precisions]))) if any(bleu.counts) else 0.0

    # each metric: the sacreBLEU metric that scores the summed statistics, and what of its score it reports
    scorers = {"bleu": (BLEU, lambda s: s.score), "chrf": (CHRF, lambda s: s.score),
               "bleu_precision": (BLEU, precision_part), "length_ratio": (BLEU, lambda s: s.ratio)}  # fmt: skip
    if metric not in scorers:
        raise ValueError(f"no sentence statistics for metric {metric!r}: choose one of {sorted(scorers)}")
    make, part = scorers[metric]
    sacre = make()
    return lambda summed: float(part(sacre._compute_score_from_stats(list(summed))))


def sentence_statistics(metric: str, hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """``(N, K)`` sacreBLEU sufficient statistics of ``metric`` (bleu, chrf), one row per sentence."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    sacre = {"bleu": BLEU, "chrf": CHRF}[metric]()
    if not hyps:
        return np.zeros((0, 0), dtype=np.float64)
    return np.asarray(sacre._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.float64)


def _resample_scores(score: Scorer, stats: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Scores of the resamples ``index`` ``(R, N)`` of ``stats`` ``(N, K)``: ``(R,)``."""
    return _scores(score, stats[index].sum(1))


def _scores(score: Scorer, sums: np.ndarray) -> np.ndarray:
    """The score of each row of summed statistics ``(R, K)``: ``(R,)``."""
    return np.array([score(row) for row in sums])


class Interval(NamedTuple):
    score: float  # on all sentences
    low: float
    high: float


NO_INTERVAL = Interval(float("nan"), float("nan"), float("nan"))  # no sentences to score


def bootstrap_interval(
    score: Scorer, stats: np.ndarray, level: float = 0.95, resamples: int = RESAMPLES, seed: int = SEED
) -> Interval:
    """The score and its ``level`` percentile bootstrap interval. Args: stats ``(N, K)``."""
    n = len(stats)
    if n == 0:
        return NO_INTERVAL
    index = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (R, N) sacreBLEU's draws
    return _percentile_interval(score(stats.sum(0)), _resample_scores(score, stats, index), level)


def _percentile_interval(point: float, resampled: np.ndarray, level: float) -> Interval:
    """``point`` with the order statistics of ``resampled`` ``(R,)`` that bound its ``level`` interval."""
    resampled, count = np.sort(resampled), len(resampled)
    # sacreBLEU's order statistics: for 95%, the R/40-th from each end (round: 1 - 0.9 is 0.0999...)
    tail = round(count * (1 - level) / 2)
    return Interval(point, float(resampled[tail]), float(resampled[count - tail - 1]))


def ratio_interval(
    score: Scorer,
    stats: np.ndarray,
    reference: np.ndarray,
    level: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The score of ``stats`` as a multiple of the score of ``reference`` (other sentences: two length
    buckets, say) with its ``level`` percentile bootstrap interval; each set is resampled on its own.
    Args: stats ``(N, K)``, reference ``(M, K)``."""
    n, m = len(stats), len(reference)
    base = score(reference.sum(0)) if m else 0.0
    if n == 0 or base == 0:
        return NO_INTERVAL
    rng = np.random.default_rng(seed)
    scores = _resample_scores(score, stats, rng.integers(0, n, size=(resamples, n)))  # (R,)
    bases = _resample_scores(score, reference, rng.integers(0, m, size=(resamples, m)))  # (R,)
    ratios = np.where(bases > 0, scores / np.where(bases > 0, bases, 1.0), np.inf)  # a reference scoring 0: inf
    return _percentile_interval(score(stats.sum(0)) / base, ratios, level)


class PairedResult(NamedTuple):
    delta: float  # score of a minus score of b, on all sentences
    p_value: float  # chance of a difference at least this large if the systems were equally good


def _observed_difference(score: Scorer, stats_a: np.ndarray, stats_b: np.ndarray) -> tuple[float, int]:
    """The score of a minus that of b on all sentences (nan without any), and the number of sentences."""
    if len(stats_a) != len(stats_b):
        raise ValueError(f"paired test needs the same sentences: {len(stats_a)} vs {len(stats_b)}")
    if len(stats_a) == 0:
        return float("nan"), 0
    return score(stats_a.sum(0)) - score(stats_b.sum(0)), len(stats_a)


def paired_bootstrap(
    score: Scorer, stats_a: np.ndarray, stats_b: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED
) -> PairedResult:
    """Paired bootstrap resampling test of two systems on the same sentences (rows aligned)."""
    delta, n = _observed_difference(score, stats_a, stats_b)
    if n == 0:
        return PairedResult(delta, float("nan"))
    index = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # the same resamples for both
    diffs = np.abs(_resample_scores(score, stats_a, index) - _resample_scores(score, stats_b, index))
    centred = diffs - diffs.mean()  # the null: no difference beyond resampling noise
    p_value = (np.sum(centred >= abs(delta)) + 1) / (resamples + 1)
    return PairedResult(delta, float(p_value))


def approximate_randomization(
    score: Scorer, stats_a: np.ndarray, stats_b: np.ndarray, trials: int = RESAMPLES, seed: int = SEED
) -> PairedResult:
    """Paired approximate randomisation test of two systems on the same sentences (rows aligned)."""
    delta, n = _observed_difference(score, stats_a, stats_b)
    if n == 0:
        return PairedResult(delta, float("nan"))
    drawn = np.random.default_rng(seed).integers(2, size=(trials, n), dtype=bool)  # (R, N) sacreBLEU's draws
    keep, swap = drawn.astype(np.float64), (~drawn).astype(np.float64)
    sums_a = keep @ stats_a + swap @ stats_b  # (R, K): pseudo-system a of each trial
    sums_b = swap @ stats_a + keep @ stats_b
    diffs = np.abs(_scores(score, sums_a) - _scores(score, sums_b))
    p_value = (np.sum(diffs >= abs(delta)) + 1) / (trials + 1)
    return PairedResult(delta, float(p_value))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0
