"""How fast ``seq2seq-attn report`` computes a study's statistics, against scoring each resample with sacreBLEU.

    python benchmarks/report_statistics.py [--study docs/results/bible_en_es_scorers] [--cells 2]

A report's statistics are, per cell, bucket and metric, a bootstrap interval and a ratio interval, and per pair
of cells, bucket and metric, a paired bootstrap and an approximate randomisation test: 1,000 resamples each.
Both ways below read the same committed translations and draw the same resamples; they differ in how a
resample is scored:

- *per row*: a resample's statistics gathered into an ``(R, N, K)`` array and summed, each of its R sums
  scored by a call to sacreBLEU, and the references' n-grams extracted again for every cell;
- *vectorised* (what ``seq2seq_attn.stats`` does): the sums as one count-matrix product, the R sums scored in
  one numpy call of sacreBLEU's formulas, each reference set's n-grams extracted once.

Times the statistics of the first ``--cells`` cells with translations and the paired tests of the first two
(every bucket, BLEU and chrF), prints each way's seconds and the speed-up measured in this run, and checks
that both give the same numbers (to 1e-9 relative, the tolerance of ``seq2seq-attn report --check``).
"""

import argparse
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from seq2seq_attn import stats
from seq2seq_attn.ablation.length_study import DEFAULT_BUCKETS, _bucket_rows, cell_statistics
from seq2seq_attn.results import TRANSLATIONS

ROOT = Path(__file__).resolve().parents[1]


def _per_row_resample_scores(score, statistics: np.ndarray, index: np.ndarray) -> np.ndarray:
    return stats._row_by_row(score, statistics[index].sum(1))  # (R, N, K) gathered; R sacreBLEU calls


def _fresh_metric(metric: str, refs: tuple):
    from sacrebleu.metrics import BLEU, CHRF

    return {"bleu": BLEU, "chrf": CHRF}[metric](references=[list(refs)])  # the references' n-grams every time


@contextmanager
def per_row():
    """``seq2seq_attn.stats`` scoring every resample with its own sacreBLEU call."""
    saved = stats._resample_scores, stats._scores, stats._metric_with_references
    stats._resample_scores, stats._scores, stats._metric_with_references = (
        _per_row_resample_scores, stats._row_by_row, _fresh_metric)  # fmt: skip
    try:
        yield
    finally:
        stats._resample_scores, stats._scores, stats._metric_with_references = saved


def statistics(cells: list[Path]) -> tuple[list, list]:
    """Each cell's intervals, and the paired tests of the first two cells per bucket and metric."""
    rows, saved = [], []
    for cell in cells:
        cell_rows, kept = cell_statistics(cell, DEFAULT_BUCKETS)
        rows.append(cell_rows)
        saved.append(kept)
    tests = []
    for _, (_, _, members) in _bucket_rows(saved[0]["src_len"], DEFAULT_BUCKETS).items():
        for metric in ("bleu", "chrf"):
            a, b = saved[0]["stats"][metric][members], saved[1]["stats"][metric][members]
            score = stats.text_scorer(metric)
            tests.append((stats.paired_bootstrap(score, b, a), stats.approximate_randomization(score, b, a)))
    return rows, tests


def numbers(result: tuple[list, list]) -> np.ndarray:
    rows, tests = result
    keys = ("score", "ci_low", "ci_high", "ratio", "ratio_low", "ratio_high")
    values = [r[k] for cell in rows for r in cell for k in keys]
    values += [v for bootstrap, randomised in tests for v in (*bootstrap, randomised.p_value)]
    return np.array(values, dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=ROOT / "docs" / "results" / "bible_en_es_scorers")
    parser.add_argument("--cells", type=int, default=2, help="cells whose statistics are timed (at least 2)")
    args = parser.parse_args()
    cells = sorted(p.parent for p in args.study.glob(f"cells/*/{TRANSLATIONS}"))[: max(2, args.cells)]
    if len(cells) < 2:
        raise SystemExit(f"{args.study} has fewer than 2 cells with {TRANSLATIONS}: choose another --study")
    timed = {}
    for name, setting in (("per row (sacreBLEU per resample)", per_row), ("vectorised", None)):
        start = time.perf_counter()
        if setting is None:
            stats._metric_with_references.cache_clear()  # its first extraction of the references counts too
            result = statistics(cells)
        else:
            with setting():
                result = statistics(cells)
        timed[name] = (time.perf_counter() - start, numbers(result))
    (slow, before), (fast, now) = timed.values()
    finite = np.isfinite(before)
    same = np.array_equal(finite, np.isfinite(now)) and np.allclose(now[finite], before[finite], rtol=1e-9, atol=0)
    print(f"{len(cells)} cells of {args.study.name}, {len(before)} numbers (intervals, ratios, paired tests)\n")
    print("| scoring | seconds |\n|---|---|")
    for name, (seconds, _) in timed.items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"\nspeed-up: {slow / fast:.1f}x; the same numbers to 1e-9 relative: {'yes' if same else 'NO'}")
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
