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

import functools
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


class TextScorer:
    """sacreBLEU's corpus BLEU or chrF (default settings) of summed sentence statistics, or one of BLEU's factors
    (:data:`BLEU_FACTORS`) of summed BLEU statistics ``(hyp_len, ref_len, matches 1-4, totals 1-4)``.

    Called on one row ``(K,)`` it asks sacreBLEU; :meth:`batch` scores many rows ``(R, K)`` at once with the
    same formulas in numpy (a bootstrap scores 1,000 resamples: one sacreBLEU call each was most of the time of
    ``seq2seq-attn report``). The two agree to the last bit or two of a float (tested against sacreBLEU)."""

    METRICS = ("bleu", "chrf", *BLEU_FACTORS)

    def __init__(self, metric: str):
        from sacrebleu.metrics import BLEU, CHRF

        if metric not in self.METRICS:
            raise ValueError(f"no sentence statistics for metric {metric!r}: choose one of {sorted(self.METRICS)}")
        self.metric = metric
        self.sacre = CHRF() if metric == "chrf" else BLEU()
        # the formulas of :meth:`batch` are sacreBLEU's for its default settings only
        assert metric != "chrf" or (self.sacre.word_order, self.sacre.eps_smoothing) == (0, False)
        assert metric == "chrf" or (self.sacre.smooth_method, self.sacre.effective_order) == ("exp", False)

    def __call__(self, summed: np.ndarray) -> float:
        from sacrebleu.utils import my_log

        score = self.sacre._compute_score_from_stats(list(summed))
        if self.metric == "bleu_precision":  # sacreBLEU's formula less the penalty; 0 without a match
            return float(np.exp(np.mean([my_log(p) for p in score.precisions]))) if any(score.counts) else 0.0
        return float(score.ratio if self.metric == "length_ratio" else score.score)

    def batch(self, sums: np.ndarray) -> np.ndarray:
        """The score of each row of summed statistics ``(R, K)``: ``(R,)``."""
        sums = np.asarray(sums, dtype=np.float64)
        return _chrf(sums, self.sacre.order, self.sacre.beta) if self.metric == "chrf" else _bleu(sums, self.metric)


def _bleu(sums: np.ndarray, part: str, orders: int = 4) -> np.ndarray:
    """sacreBLEU's ``BLEU.compute_bleu`` (exp smoothing), vectorised over rows ``(R, 2 + 2 * orders)``: ``(R,)``."""
    hyp_len, ref_len = sums[:, 0], sums[:, 1]  # (R,)
    if part == "length_ratio":
        return np.divide(hyp_len, ref_len, out=np.zeros_like(hyp_len), where=ref_len > 0)
    correct, total = sums[:, 2 : 2 + orders], sums[:, 2 + orders :]  # (R, orders) each
    precisions = np.zeros_like(correct)  # (R, orders); an order after one with no n-gram stays 0
    smooth = np.ones_like(hyp_len)  # (R,) NIST's: halves a zero precision's stand-in at each further zero
    counted = np.ones_like(hyp_len, dtype=bool)  # (R,) no order without n-grams yet
    for n in range(orders):
        counted &= total[:, n] > 0
        zero = counted & (correct[:, n] == 0)
        smooth = np.where(zero, smooth * 2, smooth)
        safe_total = np.where(counted, total[:, n], 1.0)
        precisions[:, n] = np.where(zero, 100.0 / (smooth * safe_total), 100.0 * correct[:, n] / safe_total)
        precisions[:, n] = np.where(counted, precisions[:, n], 0.0)
    logs = np.where(precisions > 0, np.log(np.where(precisions > 0, precisions, 1.0)), -9999999999.0)  # my_log
    log_sum = logs[:, 0]
    for n in range(1, orders):  # left to right, as Python's sum
        log_sum = log_sum + logs[:, n]
    matched = (correct != 0).any(axis=1)  # (R,) sacreBLEU scores 0 without any match
    if part == "bleu_precision":
        return np.where(matched, np.exp(log_sum / orders), 0.0)
    short = hyp_len < ref_len
    ratio = ref_len / np.where(hyp_len > 0, hyp_len, 1.0)
    penalty = np.where(short, np.where(hyp_len > 0, np.exp(1 - ratio), 0.0), 1.0)  # brevity penalty
    return np.where(matched, penalty * np.exp(log_sum / orders), 0.0)


def _chrf(sums: np.ndarray, orders: int, beta: float) -> np.ndarray:
    """sacreBLEU's ``CHRF._compute_f_score`` (effective-order smoothing), vectorised over rows
    ``(R, 3 * orders)`` of ``(hyp, ref, match)`` counts per order: ``(R,)``."""
    factor = beta**2
    avg_prec = avg_rec = np.zeros(len(sums))  # (R,)
    effective = np.zeros(len(sums))  # (R,) the orders with n-grams on both sides
    for i in range(orders):
        n_hyp, n_ref, n_match = sums[:, 3 * i], sums[:, 3 * i + 1], sums[:, 3 * i + 2]
        both = (n_hyp > 0) & (n_ref > 0)
        avg_prec = avg_prec + np.where(both, n_match / np.where(both, n_hyp, 1.0), 0.0)
        avg_rec = avg_rec + np.where(both, n_match / np.where(both, n_ref, 1.0), 0.0)
        effective = effective + both
    some = effective > 0
    avg_prec = np.where(some, avg_prec / np.where(some, effective, 1.0), 0.0)
    avg_rec = np.where(some, avg_rec / np.where(some, effective, 1.0), 0.0)
    denominator = factor * avg_prec + avg_rec
    positive = (avg_prec + avg_rec) != 0
    score = (1 + factor) * avg_prec * avg_rec / np.where(positive, denominator, 1.0)
    return np.where(positive, 100 * score, 0.0)


def text_scorer(metric: str) -> TextScorer:
    """The :class:`TextScorer` of ``metric`` (bleu, chrf, or one of :data:`BLEU_FACTORS`)."""
    return TextScorer(metric)


def sentence_statistics(metric: str, hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """``(N, K)`` sacreBLEU sufficient statistics of ``metric`` (bleu, chrf), one row per sentence."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        return np.zeros((0, 0), dtype=np.float64)
    sacre = _metric_with_references(metric, tuple(refs))
    return np.asarray(sacre._extract_corpus_statistics(list(hyps), None), dtype=np.float64)


@functools.lru_cache(maxsize=2)
def _metric_with_references(metric: str, refs: tuple[str, ...]):
    """sacreBLEU's ``metric`` with the n-grams of ``refs`` extracted once: a study scores many systems' outputs
    against one test set, and training scores every validation against one dev set (the references were about
    half of each extraction's time). One reference set is kept, BLEU's and chrF's: about 90 MiB for the 1,567
    Bible test verses."""
    from sacrebleu.metrics import BLEU, CHRF

    return {"bleu": BLEU, "chrf": CHRF}[metric](references=[list(refs)])


def _resample_scores(score: Scorer, stats: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Scores of the resamples ``index`` ``(R, N)`` of ``stats`` ``(N, K)``: ``(R,)``. Each resample's sums are
    its counts of each sentence times the statistics, one matrix product (not an ``(R, N, K)`` gather); sums of
    integer counts, as sacreBLEU's statistics are, come out exact either way."""
    resamples, n = index.shape
    rows = index + n * np.arange(resamples)[:, None]  # (R, N) a row of a flat (R * N,) count table
    counts = np.bincount(rows.ravel(), minlength=resamples * n).reshape(resamples, n)  # (R, N)
    return _scores(score, counts.astype(np.float64) @ stats)


def _scores(score: Scorer, sums: np.ndarray) -> np.ndarray:
    """The score of each row of summed statistics ``(R, K)``: ``(R,)``, in one call where the scorer has a
    vectorised ``batch`` (:class:`TextScorer`)."""
    batch = getattr(score, "batch", None)
    return batch(sums) if batch is not None else _row_by_row(score, sums)


def _row_by_row(score: Scorer, sums: np.ndarray) -> np.ndarray:
    """The score of each row of summed statistics ``(R, K)``, one call per row: ``(R,)``."""
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
    # scored as the resamples are (a resample equal to the whole corpus then ties with it exactly)
    a, b = _scores(score, np.stack([stats_a.sum(0), stats_b.sum(0)]))
    return float(a - b), len(stats_a)


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
