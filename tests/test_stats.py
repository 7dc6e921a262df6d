"""Bootstrap intervals and the paired tests (bootstrap, approximate randomisation), on known distributions and text."""

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from seq2seq_attn.stats import (
    approximate_randomization,
    bootstrap_interval,
    mean_std,
    paired_bootstrap,
    ratio_interval,
    sentence_statistics,
    statistics_of,
    text_scorer,
)

PAIRED_TESTS = [paired_bootstrap, approximate_randomization]


def mean_of(summed: np.ndarray) -> float:
    """Statistics (value, 1) per sentence: the corpus score is the mean value."""
    return float(summed[0] / summed[1])


def bernoulli(n: int, p: float, seed: int) -> np.ndarray:
    values = (np.random.default_rng(seed).random(n) < p).astype(float)
    return np.stack([values, np.ones(n)], axis=1)  # (N, 2)


def test_bootstrap_interval_of_a_mean_has_the_textbook_width_and_coverage():
    p, n = 0.3, 2000
    half_width = 1.96 * np.sqrt(p * (1 - p) / n)  # the normal approximation: 0.020
    covered = 0
    for trial in range(40):
        interval = bootstrap_interval(mean_of, bernoulli(n, p, trial), resamples=400, seed=trial)
        assert interval.low <= interval.score <= interval.high
        assert (interval.high - interval.low) / 2 == pytest.approx(half_width, rel=0.2)
        covered += interval.low <= p <= interval.high
    assert covered >= 34  # 95% of 40 is 38; binomial sd 1.4


def test_a_wider_level_gives_a_wider_interval():
    stats = bernoulli(500, 0.5, 1)
    narrow, wide = (bootstrap_interval(mean_of, stats, level, resamples=500) for level in (0.8, 0.99))
    assert wide.low < narrow.low < narrow.high < wide.high


@pytest.mark.parametrize("level, tail", [(0.95, 25), (0.9, 50), (0.8, 100)])
def test_interval_bounds_are_the_order_statistics_of_the_resampled_scores(level, tail):
    values = np.random.default_rng(2).normal(size=300)  # continuous: neighbouring order statistics differ
    stats, resamples = np.stack([values, np.ones(300)], axis=1), 1000  # (N, 2)
    index = np.random.default_rng(7).integers(0, 300, size=(resamples, 300))  # the same draws
    scores = np.sort(stats[index, 0].mean(1))  # (R,)
    interval = bootstrap_interval(mean_of, stats, level, resamples=resamples, seed=7)
    assert (interval.low, interval.high) == pytest.approx((scores[tail], scores[resamples - tail - 1]), abs=1e-12)


def test_text_statistics_score_like_sacrebleu():
    hyps = ["the cat sat on the mat .", "a dog runs in the park", "nothing like it"]
    refs = ["the cat sat on the mat .", "the dog runs in a park", "something else entirely here"]
    for name, sacre in (("bleu", BLEU()), ("chrf", CHRF())):
        stats = sentence_statistics(name, hyps, refs)
        assert stats.shape[0] == 3
        assert text_scorer(name)(stats.sum(0)) == pytest.approx(sacre.corpus_score(hyps, [refs]).score, abs=1e-9)


def test_bleus_factors_are_sacrebleus_brevity_penalty_inputs_and_precisions():
    refs = ["the cat sat on the mat today .", "a dog runs in the park near the house", "something else entirely here"]
    hyps = ["the cat sat on the mat", "a dog runs in a park", "nothing like it"]  # short: a brevity penalty
    stats = sentence_statistics("bleu", hyps, refs).sum(0)
    sacre = BLEU().corpus_score(hyps, [refs])
    assert sacre.bp < 1
    assert text_scorer("length_ratio")(stats) == pytest.approx(sacre.sys_len / sacre.ref_len, abs=1e-12)
    precision = text_scorer("bleu_precision")(stats)
    assert precision == pytest.approx(np.exp(np.mean(np.log(sacre.precisions))), abs=1e-9)  # geometric mean
    assert precision * sacre.bp == pytest.approx(sacre.score, abs=1e-9) and precision > sacre.score
    assert text_scorer("bleu_precision")(sentence_statistics("bleu", [""], ["a b"]).sum(0)) == 0.0  # no output
    longer = sentence_statistics("bleu", [h + " and more words" for h in hyps], refs).sum(0)  # no penalty
    assert text_scorer("bleu_precision")(longer) == pytest.approx(text_scorer("bleu")(longer), abs=1e-9)
    assert text_scorer("length_ratio")(longer) > 1


def edge_rows(metric: str) -> np.ndarray:
    """Summed statistics of real resamples, and the rows sacreBLEU treats apart: no output, no match, words but
    no matching bigram (smoothed precisions), an order with no n-grams (a one-word output; chrF's effective order),
    an output longer than its reference."""
    hyps = ["the cat sat on the mat", "a dog runs in a park", "nothing like it", "", "dog", "x y z",
            "sat the on cat mat", "dog", "cat sat on"]  # fmt: skip
    refs = ["the cat sat on the mat today .", "a dog runs in the park", "something else entirely", "a b", "cat",
            "p q r s", "the cat sat on the mat", "dogs run", "cat sat on the"]  # fmt: skip
    stats = sentence_statistics(metric, hyps, refs)  # (6, K)
    index = np.random.default_rng(0).integers(0, len(hyps), size=(200, len(hyps)))  # (200, 6) resamples
    singles = np.eye(len(hyps)) @ stats  # each sentence alone
    return np.concatenate([stats[index].sum(1), singles, stats.sum(0, keepdims=True), np.zeros((1, stats.shape[1]))])


@pytest.mark.parametrize("metric", ["bleu", "chrf", "bleu_precision", "length_ratio"])
def test_the_vectorised_text_scores_are_sacrebleus_row_by_row(metric):
    score = text_scorer(metric)
    rows = edge_rows(statistics_of(metric))  # (R, K)
    expected = np.array([score(row) for row in rows])  # sacreBLEU, one call per row
    assert len(set(expected.round(9))) > 20  # the rows are not all alike
    assert (expected == 0).any()  # a row that scores 0 is among them
    np.testing.assert_allclose(score.batch(rows), expected, rtol=1e-13, atol=1e-13)


def test_resampled_sums_are_the_gathered_sums_of_integer_statistics():
    from seq2seq_attn.stats import _resample_scores

    stats = sentence_statistics("chrf", sentences(1, 50), sentences(0, 50))  # (50, K) counts
    index = np.random.default_rng(3).integers(0, 50, size=(300, 50))  # (R, N)
    total = lambda summed: float(summed @ np.arange(1, stats.shape[1] + 1))  # noqa: E731 every column weighed
    assert np.array_equal(_resample_scores(total, stats, index), [total(row) for row in stats[index].sum(1)])


def sentences(seed: int, n: int = 120) -> list[str]:
    rng = np.random.default_rng(seed)
    words = "the a cat dog sat ran on in mat park house red big small".split()
    return [" ".join(rng.choice(words, size=rng.integers(5, 15))) for _ in range(n)]


@pytest.mark.parametrize("paired_test", PAIRED_TESTS)
def test_paired_test_finds_no_difference_between_identical_systems(paired_test):
    refs, hyps = sentences(0), sentences(1)
    stats = sentence_statistics("bleu", hyps, refs)
    result = paired_test(text_scorer("bleu"), stats, stats.copy(), 300)
    assert result.delta == 0.0 and result.p_value == 1.0


@pytest.mark.parametrize("paired_test", PAIRED_TESTS)
def test_paired_test_finds_a_clear_difference_and_not_a_made_up_one(paired_test):
    refs = sentences(0)
    good = [r if i % 4 else sentences(9, 1)[0] for i, r in enumerate(refs)]  # 3 of 4 sentences exact
    bad = sentences(1)  # unrelated word salad
    score = text_scorer("bleu")
    clear = paired_test(score, sentence_statistics("bleu", good, refs), sentence_statistics("bleu", bad, refs))
    assert clear.delta > 30 and clear.p_value < 0.01
    # two equally good systems (the same salad generator, other seeds): no significance at 0.05
    noise = paired_test(
        score, sentence_statistics("bleu", sentences(2), refs), sentence_statistics("bleu", sentences(3), refs)
    )
    assert noise.p_value > 0.05


def test_mean_std_over_seeds():
    assert mean_std([1.0, 3.0]) == (2.0, pytest.approx(np.sqrt(2.0)))
    assert mean_std([5.0]) == (5.0, 0.0)


def test_unknown_metric_and_unpaired_inputs_are_refused():
    with pytest.raises(ValueError, match="choose one of"):
        text_scorer("ter")
    for paired_test in PAIRED_TESTS:
        with pytest.raises(ValueError, match="same sentences"):
            paired_test(mean_of, bernoulli(3, 0.5, 0), bernoulli(4, 0.5, 0))


def test_interval_and_paired_test_give_sacrebleus_numbers_for_the_same_seed_and_resamples():
    from sacrebleu.significance import PairedTest

    refs = sentences(0, 200)
    baseline = [r if i % 3 else sentences(7, 1)[0] for i, r in enumerate(refs)]  # 2 of 3 sentences exact
    system = [r if i % 2 else sentences(8, 1)[0] for i, r in enumerate(refs)]  # 1 of 2 exact
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU()}, [refs], test_type="bs",
                      n_samples=1000)  # fmt: skip
    _, results = test()
    sacre_baseline, sacre_system = results["BLEU"]
    score = text_scorer("bleu")
    stats_baseline, stats_system = (sentence_statistics("bleu", h, refs) for h in (baseline, system))
    interval = bootstrap_interval(score, stats_baseline, resamples=1000, seed=12345)
    assert interval.score == pytest.approx(sacre_baseline.score, abs=1e-9)
    # sacreBLEU's ± ci, to float32 precision (it sums the statistics in float32; the resamples are the same)
    assert (interval.high - interval.low) / 2 == pytest.approx(sacre_baseline.ci, rel=1e-6)
    paired = paired_bootstrap(score, stats_system, stats_baseline, resamples=1000, seed=12345)
    assert paired.delta == pytest.approx(sacre_system.score - sacre_baseline.score, abs=1e-9)
    assert paired.p_value == sacre_system.p_value and 0.001 < paired.p_value < 1


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_approximate_randomization_gives_sacrebleus_p_value_for_the_same_seed_and_trials(metric):
    from sacrebleu.significance import PairedTest

    refs = sentences(0, 200)
    baseline = [r if i % 3 else sentences(7, 1)[0] for i, r in enumerate(refs)]  # 2 of 3 sentences exact
    system = [r if i % 5 < 3 else sentences(8, 1)[0] for i, r in enumerate(refs)]  # 3 of 5 exact: close
    sacre_metric = {"bleu": BLEU, "chrf": CHRF}[metric]()
    test = PairedTest([("baseline", baseline), ("system", system)], {"m": sacre_metric}, [refs], test_type="ar",
                      n_samples=1000)  # fmt: skip
    _, results = test()
    sacre_baseline, sacre_system = next(v for k, v in results.items() if k != "System")  # keyed by its name
    stats_baseline, stats_system = (sentence_statistics(metric, h, refs) for h in (baseline, system))
    ar = approximate_randomization(text_scorer(metric), stats_system, stats_baseline, trials=1000, seed=12345)
    assert ar.delta == pytest.approx(sacre_system.score - sacre_baseline.score, abs=1e-9)
    assert ar.p_value == sacre_system.p_value and 0.001 < ar.p_value < 1


def test_ratio_interval_of_two_means_has_the_delta_method_width_and_coverage():
    p, q, n, m = 0.3, 0.6, 2000, 1000  # the ratio of the means is 0.5
    ratio = p / q
    half_width = 1.96 * ratio * np.sqrt((1 - p) / (p * n) + (1 - q) / (q * m))  # the delta method: 0.034
    covered = 0
    for trial in range(40):
        interval = ratio_interval(mean_of, bernoulli(n, p, trial), bernoulli(m, q, 100 + trial), resamples=400,
                                  seed=trial)  # fmt: skip
        assert interval.low <= interval.score <= interval.high
        assert (interval.high - interval.low) / 2 == pytest.approx(half_width, rel=0.2)
        covered += interval.low <= ratio <= interval.high
    assert covered >= 34


def test_ratio_interval_over_a_constant_reference_is_the_scores_own_interval():
    stats, constant = bernoulli(300, 0.4, 5), np.tile([2.0, 1.0], (50, 1))  # every resample of it scores 2
    own = bootstrap_interval(mean_of, stats, resamples=500, seed=9)
    ratio = ratio_interval(mean_of, stats, constant, resamples=500, seed=9)
    assert ratio == pytest.approx((own.score / 2, own.low / 2, own.high / 2), abs=1e-12)
    # no reference sentences, or a reference that scores 0: no ratio
    assert np.isnan(ratio_interval(mean_of, stats, constant[:0]).score)
    assert np.isnan(ratio_interval(mean_of, stats, np.tile([0.0, 1.0], (5, 1))).score)
