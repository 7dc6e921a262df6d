"""The statistics and figures of a length study on real text, from the cells' saved translations.

Each finished cell keeps ``test_translations.jsonl.gz`` (per test sentence: source words, hypothesis,
reference) and ``val_history.jsonl`` (every validation, overall and per bucket). From those alone,
without checkpoints, :func:`write_length_study` writes into the ablation folder:

- ``statistics.csv``: per cell, bucket and metric (BLEU, chrF, and BLEU's two factors: its n-gram precision
  part and the output length over the reference's) the score with its 95% bootstrap interval, and the score
  as a multiple of the cell's 11-20-word score (``ratio``) with that ratio's interval;
- ``significance.csv``: per pair of models, seed, bucket and metric the difference and the p-values of
  the paired bootstrap test (``p_value``) and of approximate randomisation (``p_value_ar``)
  (:mod:`seq2seq_attn.stats`); both tables to 10 significant digits, so that a machine whose float sums
  differ in the last bit writes the same file;
- ``length_curve.png``: BLEU against source length, a line per model (mean over seeds) and a band
  spanning the seeds' 95% intervals: the look of Bahdanau et al.'s Fig. 2;
- ``ratio_curve.png``: the same with each bucket's BLEU as a multiple of the model's 11-20-word BLEU;
- ``training_gap.png``: BLEU per length bucket at every validation, for the bottleneck and the
  attention models: how the gap between short and long sentences opens during training;
- ``learning_curves.png``: dev BLEU, the share of saturated attention rows and (where validations logged
  it) the output's length over the reference's at every validation, a row of plots per panel of the grid
  file's ``panels:``;

and returns the markdown tables for ``summary.md``, whose paired-test table shows the pairs of the grid
file's ``compare:`` (all of them without it).
"""

import itertools
import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import torch

from seq2seq_attn.metrics import DEFAULT_BUCKETS, SATURATED, bucket_index, buckets, title
from seq2seq_attn.plots import bottleneck_first, bottleneck_last, curve_styles, legend_below
from seq2seq_attn.results import LENGTH_PENALTY, TRANSLATIONS, VAL_HISTORY, plain, read_json, read_jsonl_gz, write_csv
from seq2seq_attn.stats import (
    BLEU_FACTORS,
    NO_INTERVAL,
    RESAMPLES,
    Interval,
    Scorer,
    approximate_randomization,
    bootstrap_interval,
    mean_std,
    paired_bootstrap,
    ratio_interval,
    sentence_statistics,
    statistics_of,
    text_scorer,
)

TEXT_METRICS = ("bleu", "chrf")
SCORED = (*TEXT_METRICS, *BLEU_FACTORS)  # the metrics of statistics.csv
STAT_DIGITS = 10  # significant digits of the bootstrap tables: the same file wherever a float sum's last bit differs
ALL = "all"
REFERENCE = "11-20"  # the bucket a model's other buckets are compared with (Fig. 2's question)
SAME = Interval(1.0, 1.0, 1.0)  # the reference bucket against itself: exactly 1, nothing to resample


def _cell_models(df: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its model label and seed (from results.csv, labelled by the report)."""
    seed_cols = [c for c in df.columns if "seed" in c and c not in ("model",)]
    cells = df.drop_duplicates("cell")[["cell", "model", "baseline", *seed_cols]].copy()
    seeds = cells[seed_cols[0]] if seed_cols else pd.Series(0, index=cells.index)
    cells["seed"] = ["-" if pd.isna(v) else plain(v) for v in seeds]  # "-": a cell without a seed (a peer's)
    return cells


def _bucket_rows(
    src_len: np.ndarray, edges: Sequence[int]
) -> dict[str, tuple[Optional[int], Optional[int], np.ndarray]]:
    """Sentence indices per bucket label, with the bucket's bounds; ``all`` first."""
    index = bucket_index(torch.tensor(src_len, dtype=torch.float), edges).numpy()
    rows = {ALL: (None, None, np.arange(len(src_len)))}
    for i, bucket in enumerate(buckets(edges)):
        members = np.nonzero(index == i)[0]
        if len(members):
            rows[bucket.label] = (bucket.lo, bucket.hi, members)
    return rows


def _reference_rows(by_bucket: dict) -> np.ndarray:
    """The sentence indices of the :data:`REFERENCE` bucket in :func:`_bucket_rows` (none when it is empty)."""
    return by_bucket.get(REFERENCE, (None, None, np.arange(0)))[2]


def cell_statistics(folder: Path, edges: Sequence[int]) -> tuple[list[dict], dict]:
    """Score and 95% interval per bucket and metric (:data:`SCORED`) of one cell, and per bucket its score as a
    multiple of the :data:`REFERENCE` bucket's with that ratio's 95% interval; and its sentence statistics per
    metric."""
    rows = read_jsonl_gz(folder / TRANSLATIONS)
    src_len = np.array([r["src_len"] for r in rows])
    stats = {m: sentence_statistics(m, [r["hyp"] for r in rows], [r["ref"] for r in rows]) for m in TEXT_METRICS}
    by_bucket = _bucket_rows(src_len, edges)
    reference = _reference_rows(by_bucket)
    out = []
    for label, (lo, hi, members) in by_bucket.items():
        for metric in SCORED:
            scorer, statistics = text_scorer(metric), stats[statistics_of(metric)]
            interval = bootstrap_interval(scorer, statistics[members])
            ratio = (NO_INTERVAL if label == ALL else SAME if label == REFERENCE
                     else ratio_interval(scorer, statistics[members], statistics[reference]))  # fmt: skip
            out.append({"bucket": label, "lo": lo, "hi": hi, "metric": metric, "score": interval.score,
                        "ci_low": interval.low, "ci_high": interval.high, "count": len(members),
                        "ratio": ratio.score, "ratio_low": ratio.low, "ratio_high": ratio.high})  # fmt: skip
    return out, {"stats": stats, "src_len": src_len}


def significance(cells: pd.DataFrame, saved: dict, edges: Sequence[int]) -> list[dict]:
    """Paired bootstrap and approximate randomisation tests of every pair of models, seed by seed, per bucket
    and metric."""
    out = []
    models = sorted(cells.model.unique(), key=bottleneck_first)
    for model_a, model_b in itertools.combinations(models, 2):
        for seed in sorted(set(cells[cells.model == model_a].seed) & set(cells[cells.model == model_b].seed)):
            cell_a = cells[(cells.model == model_a) & (cells.seed == seed)].cell.iloc[0]
            cell_b = cells[(cells.model == model_b) & (cells.seed == seed)].cell.iloc[0]
            for label, (lo, _, members) in _bucket_rows(saved[cell_a]["src_len"], edges).items():
                for metric in TEXT_METRICS:
                    a, b = saved[cell_a]["stats"][metric][members], saved[cell_b]["stats"][metric][members]
                    scorer = text_scorer(metric)
                    result, randomised = paired_bootstrap(scorer, b, a), approximate_randomization(scorer, b, a)
                    pair = {"model_a": model_a, "model_b": model_b, "seed": seed, "bucket": label, "lo": lo}
                    out.append({**pair, "metric": metric, "delta_b_minus_a": result.delta, "p_value": result.p_value,
                                "p_value_ar": randomised.p_value})  # fmt: skip
    return out


def _table(stats: pd.DataFrame, metric: str, digits: int = 1) -> str:
    """Markdown: per model and bucket, mean ± std over seeds [lowest, highest bound of the seeds' 95% intervals]."""
    part = stats[stats.metric == metric]
    order = [ALL, *part[part.bucket != ALL].sort_values("lo").bucket.drop_duplicates()]
    counts = part.drop_duplicates("bucket").set_index("bucket")["count"]
    lines = [
        "| model | " + " | ".join(f"{b} ({int(counts[b])})" for b in order) + " |",
        "|" + "---|" * (len(order) + 1),
    ]
    for model in sorted(part.model.unique(), key=bottleneck_last):
        cells = []
        for bucket in order:
            rows = part[(part.model == model) & (part.bucket == bucket)]
            mean, std = mean_std(rows.score.tolist())
            spread = f" ± {std:.{digits}f}" if len(rows) > 1 else ""
            cells.append(f"{mean:.{digits}f}{spread} [{rows.ci_low.min():.{digits}f}, {rows.ci_high.max():.{digits}f}]")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compared_pairs(models: Sequence[str], compare: Sequence[str | Sequence[str]]) -> list[tuple[str, str]]:
    """``(A, B)`` for each pair of models a grid file's ``compare:`` names, for a table of B − A: a pattern pairs
    each model it names (A) with every other model (B); a pair of patterns ``[A, B]`` pairs the models the first
    names with those the second names. Shell-style patterns on the models' labels; the grid file's order, each
    pair once."""

    def named(pattern: str) -> list[str]:
        return [m for m in models if fnmatchcase(m, pattern)]

    pairs: list[tuple[str, str]] = []
    for entry in compare:
        firsts, seconds = (named(entry), models) if isinstance(entry, str) else (named(entry[0]), named(entry[1]))
        for a, b in itertools.product(firsts, seconds):
            if a != b and (a, b) not in pairs and (b, a) not in pairs:
                pairs.append((a, b))
    return pairs


def _significance_table(sig: pd.DataFrame, metric: str, pairs: Optional[list[tuple[str, str]]] = None) -> str:
    """Markdown: per pair of models and bucket, the mean difference and each test's largest p over seeds; a
    difference whose sign changes from seed to seed is not significant, whatever each seed's p. ``pairs``: the
    ``(A, B)`` rows to show, as B − A (both tests are two-sided, so a pair tested the other way round keeps its
    p-values and changes its sign); every tested pair without it."""
    part = sig[sig.metric == metric]
    order = [ALL, *part[part.bucket != ALL].sort_values("lo").bucket.drop_duplicates()]
    lines = ["| B − A | " + " | ".join(order) + " |", "|" + "---|" * (len(order) + 1)]
    tested = {pair: rows for pair, rows in part.groupby(["model_a", "model_b"], sort=False)}
    for a, b in tested if pairs is None else pairs:
        if (a, b) in tested:
            rows = tested[(a, b)]
        elif (b, a) in tested:
            rows = tested[(b, a)].assign(delta_b_minus_a=lambda r: -r.delta_b_minus_a)
        else:
            continue  # no seed of one model has its translations yet
        cells = []
        for bucket in order:
            r = rows[rows.bucket == bucket]
            p_bootstrap, p_randomised = r.p_value.max(), r.p_value_ar.max()
            if (r.delta_b_minus_a > 0).any() and (r.delta_b_minus_a < 0).any():
                mark = " (seeds disagree)"
            else:
                mark = "" if max(p_bootstrap, p_randomised) < 0.05 else " (n.s.)"
            cells.append(f"{r.delta_b_minus_a.mean():+.1f}, p ≤ {p_bootstrap:.3f} / {p_randomised:.3f}{mark}")
        lines.append(f"| {b} − {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BEYOND_METRICS = ("bleu", "length_ratio", "bleu_precision")  # BLEU beyond the cap, and why it falls


def beyond_cap(
    cells: pd.DataFrame, saved: dict, caps: dict[str, int], edges: Sequence[int],
    scorers: Optional[dict[str, Scorer]] = None,
) -> dict[str, list[dict]]:  # fmt: skip
    """Fig. 2's question per model and seed: the score on all test sentences longer than the model's training
    cap, as a multiple of its :data:`REFERENCE` bucket's, with that ratio's 95% interval; one list of rows per
    metric of ``scorers`` (by default :data:`BEYOND_METRICS`, scored by :func:`text_scorer`)."""
    scorers = scorers or {metric: text_scorer(metric) for metric in BEYOND_METRICS}
    out = {metric: [] for metric in scorers}
    for _, cell in cells[cells.model.isin(list(caps))].iterrows():
        src_len = saved[cell.cell]["src_len"]
        beyond = np.nonzero(src_len > caps[cell.model])[0]
        reference = _reference_rows(_bucket_rows(src_len, edges))
        if not len(beyond) or not len(reference):
            continue
        for metric, score in scorers.items():
            stats = saved[cell.cell]["stats"][statistics_of(metric)]
            ratio = ratio_interval(score, stats[beyond], stats[reference])
            out[metric].append({"model": cell.model, "seed": cell.seed, "cap": caps[cell.model], "count": len(beyond),
                                "score": score(stats[beyond].sum(0)), "reference": score(stats[reference].sum(0)),
                                "ratio": ratio.score, "ratio_low": ratio.low, "ratio_high": ratio.high})  # fmt: skip
    return out


def beyond_cap_table(
    rows: list[dict], collapse: float = 0.5, holds: float = 0.8, length: Sequence[dict] = (),
    precision: Sequence[dict] = (),
) -> str:  # fmt: skip
    """Markdown of :func:`beyond_cap` (mean over seeds; bounds: the seeds' lowest and highest), with the reading
    the interval allows: ``≤ collapse×`` when its upper bound is, ``≥ holds×`` when its lower bound is. With the
    :func:`beyond_cap` rows of BLEU's factors, two more columns say why BLEU falls: ``length`` (the output's
    length over the reference's beyond the cap and at :data:`REFERENCE`), ``precision`` (the ratio of BLEU
    without its brevity penalty)."""
    if not rows:
        return ""
    factors = [(header, frame, show) for header, frame, show in (
        (f"output length beyond ({REFERENCE})", pd.DataFrame(length), _lengths),
        ("without the brevity penalty [95%]", pd.DataFrame(precision), _ratio)) if not frame.empty]  # fmt: skip
    lines = [f"| model | trained on ≤ words | test sentences beyond | score beyond ({REFERENCE}) | ratio [95%] | "
             "reading |" + "".join(f" {header} |" for header, _, _ in factors),
             "|---|---|---|---|---|---|" + "---|" * len(factors)]  # fmt: skip
    for model, part in sorted(pd.DataFrame(rows).groupby("model"), key=lambda kv: bottleneck_last(kv[0])):
        low, high = part.ratio_low.min(), part.ratio_high.max()
        reading = (f"falls to ≤ {collapse}×" if high <= collapse else f"keeps ≥ {holds}×" if low >= holds
                   else "neither bound settles it")  # fmt: skip
        cells = [str(part.cap.iloc[0]), str(part["count"].iloc[0]), f"{part.score.mean():.1f} "
                 f"({part.reference.mean():.1f})", _ratio(part), reading]  # fmt: skip
        cells += [show(frame[frame.model == model]) for _, frame, show in factors]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio(rows: pd.DataFrame) -> str:
    """:func:`beyond_cap` rows: the mean ratio over seeds [the seeds' lowest and highest bound]; '-' for none."""
    if rows.empty or rows.ratio.isna().all():
        return "-"
    return f"{rows.ratio.mean():.2f}× [{rows.ratio_low.min():.2f}, {rows.ratio_high.max():.2f}]"


def _lengths(rows: pd.DataFrame) -> str:
    """:func:`beyond_cap` rows of ``length_ratio``: beyond the cap (at the reference bucket), mean over seeds."""
    return "-" if rows.empty else f"{rows.score.mean():.2f} ({rows.reference.mean():.2f})"


def training_caps(df: pd.DataFrame) -> dict[str, int]:
    """Per model, the longest training sentence (``train_max_length`` of its cells' results; from an older
    results.csv without that column, the first bucket flagged as extrapolation, less one), for the models
    tested beyond it; the others are left out."""
    rows, caps = df[df.bucket != ALL], {}
    for model, part in rows.groupby("model"):
        recorded = part["train_max_length"].dropna() if "train_max_length" in part else pd.Series(dtype=float)
        flagged = part[part.extrapolation.astype(str).str.lower() == "true"]
        cap = recorded.max() if len(recorded) else (flagged.lo.min() - 1 if len(flagged) else None)
        if cap is not None and part.lo.max() > cap:
            caps[model] = int(cap)
    return caps


def ratio_table(stats: pd.DataFrame, caps: dict[str, int], reference: str = REFERENCE, metric: str = "bleu") -> str:
    """Markdown: per model, each bucket's score (mean over seeds) as a multiple of its ``reference`` bucket's,
    the question of Bahdanau et al.'s Fig. 2, in brackets the lowest lower and highest upper bound of the seeds'
    95% intervals of that ratio (where ``stats`` has them: :func:`cell_statistics`); † marks the buckets beyond
    the model's training cap."""
    part = stats[(stats.metric == metric) & (stats.bucket != ALL)]
    if reference not in set(part.bucket):
        return ""
    intervals = reference == REFERENCE and "ratio_low" in part
    order = part.sort_values("lo").bucket.drop_duplicates().tolist()
    lines = ["| model | " + " | ".join(order) + " |", "|" + "---|" * (len(order) + 1)]
    for model in sorted(part.model.unique(), key=bottleneck_last):
        rows = part[part.model == model]
        means = rows.groupby("bucket").agg(score=("score", "mean"), lo=("lo", "first"))
        bounds = rows.groupby("bucket").agg(low=("ratio_low", "min"), high=("ratio_high", "max")) if intervals else None
        base = means.score.get(reference)
        cells = []
        for bucket in order:
            if bucket not in means.index or not base:
                cells.append("-")
                continue
            mark = " †" if means.lo[bucket] > caps.get(model, float("inf")) else ""
            spread = f" [{bounds.low[bucket]:.2f}, {bounds.high[bucket]:.2f}]" if bounds is not None else ""
            cells.append(f"{means.score[bucket] / base:.2f}×{spread}{mark}")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def panel_models(models: Sequence[str], panels: Optional[dict[str, list[str]]] = None) -> list[tuple[str, list[str]]]:
    """``(title, models)`` per panel of a length figure. A grid file's ``panels:`` maps each panel's title to
    the model labels it draws, as shell-style patterns (``luong + *``); a model that no panel names is drawn
    in every panel (the reference rows), and a panel that names no model yet (a grid still running) is left
    out. Without ``panels``: one panel of every model."""
    if not panels:
        return [("", list(models))]
    named = {name: {m for m in models if any(fnmatchcase(m, p) for p in patterns)} for name, patterns in panels.items()}
    everywhere = {m for m in models if not any(m in chosen for chosen in named.values())}
    return [(name, [m for m in models if m in chosen or m in everywhere]) for name, chosen in named.items() if chosen]


def _ratio_axis(axes, part: pd.DataFrame, layout: list[tuple[str, list[str]]]) -> None:
    """The ratio figure's y axis fitted to the buckets from the reference bucket on, where Fig. 2's question lies,
    when a shorter bucket's ratio (often far above 1) would stretch it by more than a quarter and squeeze them
    into a strip; each panel then names the shorter buckets whose mean ratio it leaves above the axis, with
    their range."""
    reference = part[part.bucket == REFERENCE].lo
    if reference.empty:
        return
    longer = part[part.lo >= reference.iloc[0]]
    top = 1.05 * max(1.2, longer.ratio_high.max())
    if part.ratio_high.max() <= 1.25 * top:
        return
    means = part[part.lo < reference.iloc[0]].groupby(["model", "lo", "bucket"]).ratio.mean()
    for ax, (_, drawn) in zip(axes, layout):
        ax.set_ylim(top=top)
        above = means[(means > top) & means.index.get_level_values("model").isin(drawn)]
        notes = []
        for (_, bucket), v in above.groupby(level=["lo", "bucket"]):
            low, high = f"{v.min():.1f}", f"{v.max():.1f}"
            many = "s" if len(drawn) > 1 else ""
            notes.append(
                f"{bucket} words: {low if low == high else f'{low}-{high}'}× ({len(v)} of {len(drawn)} model{many})"
            )
        if notes:  # the lower left, where the short buckets' lines have left the plot
            ax.text(0.01, 0.02, "above the axis: " + "; ".join(notes), transform=ax.transAxes, fontsize=7,
                    color="dimgrey")  # fmt: skip


def plot_length_curve(
    stats: pd.DataFrame, path: Path, metric: str = "bleu", caps: Optional[dict] = None, styles: Optional[dict] = None,
    ratio: bool = False, panels: Optional[dict[str, list[str]]] = None,
) -> Path:  # fmt: skip
    """BLEU per bucket, a line per model; with ``caps`` (:func:`training_caps`), the buckets beyond a model's
    training cap are drawn with open markers, and each cap is a vertical line. With ``ratio``, each bucket's
    BLEU as a multiple of the model's 11-20-word BLEU instead (Fig. 2's question, models of any quality on
    one scale), the band the seeds' 95% intervals of that ratio, the y axis fitted to the buckets from 11-20
    on (:func:`_ratio_axis`). With ``panels`` (:func:`panel_models`), side by side panels on one scale, each
    with the models its patterns name and the reference rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = caps or {}
    part = stats[(stats.metric == metric) & (stats.bucket != ALL)]
    models = sorted(part.model.unique(), key=bottleneck_last)
    styles = styles or curve_styles(models)
    layout = panel_models(models, panels)
    fig, axes = plt.subplots(1, len(layout), figsize=(7.5 if len(layout) == 1 else 6.2 * len(layout), 4.8),
                             sharey=True, squeeze=False)  # fmt: skip
    value, low, high = ("ratio", "ratio_low", "ratio_high") if ratio else ("score", "ci_low", "ci_high")
    for ax, (heading, drawn) in zip(axes[0], layout):
        for model in drawn:
            rows = part[part.model == model]
            by_bucket = rows.groupby("lo").agg(score=(value, "mean"), low=(low, "min"), high=(high, "max"))
            x = by_bucket.index.to_numpy() + 4.5  # the bucket's middle word count
            line = ax.plot(x, by_bucket.score, marker="o", ms=3, label=model, **styles[model])[0]
            ax.fill_between(x, by_bucket.low, by_bucket.high, alpha=0.15, color=line.get_color())
            beyond = by_bucket.index.to_numpy() > caps.get(model, float("inf"))
            if beyond.any():  # beyond the longest training sentence: open markers
                ax.plot(x[beyond], by_bucket.score[beyond], "o", ms=6, mfc="white", color=line.get_color())
        if ratio:  # Fig. 2's readings: 1 = as good as at 11-20 words, 0.5 = Bahdanau et al.'s collapse
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.axhline(0.5, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
        if heading:
            ax.set_title(heading, fontsize=9)
    if ratio:
        _ratio_axis(axes[0], part, layout)
    for ax, (_, drawn) in zip(axes[0], layout):  # once every panel is drawn: the shared scale is final
        for cap in sorted({caps[m] for m in drawn if m in caps}):
            ax.axvline(cap + 0.5, color="grey", ls=":", lw=1)
            ax.text(cap + 1, ax.get_ylim()[1], f" trained on ≤ {cap} words", fontsize=7, color="grey", va="top")
    fig.supxlabel("source sentence length (words; the middle of each 10-word bucket; open: beyond the training cap)",
                  fontsize=10)  # fmt: skip
    if ratio:
        axes[0][0].set_ylabel(f"test {title(metric)} / the model's {REFERENCE}-word {title(metric)}")
    else:
        axes[0][0].set_ylabel(f"{title(metric)} (test)")
    caption = "quality vs source length: mean over seeds, band = the seeds' 95% bootstrap intervals"
    if len(layout) > 1:
        fig.suptitle(caption, fontsize=10)
    else:
        axes[0][0].set_title(caption, fontsize=9)
    fig.tight_layout()
    legend_below(fig, list(axes[0]), ncol=2 * len(layout))  # where it hides no curve and no cap's label
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_training_gap(out: Path, cells: pd.DataFrame, path: Path, metric: str = "bleu") -> Optional[Path]:
    """Per model (first seed): validation BLEU per length bucket against training updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    firsts = cells.sort_values("seed").drop_duplicates("model")
    histories = {row.model: read_history(out / "cells" / row.cell) for _, row in firsts.iterrows()}
    histories = {m: h for m, h in histories.items() if h}
    if not histories:
        return None
    models = sorted(histories, key=bottleneck_first)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.8), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, model in zip(axes[0], models):
        labels = [b["bucket"] for b in max(histories[model], key=lambda h: len(h["buckets"]))["buckets"]]
        for k, label in enumerate(labels):
            points = [(h["step"], b[metric]) for h in histories[model] for b in h["buckets"]
                      if b["bucket"] == label and metric in b]  # fmt: skip
            if points:
                ax.plot(*zip(*points), marker=".", color=cmap(k / max(1, len(labels) - 1)), label=label)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("updates")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"validation {title(metric)}")
    axes[0][-1].legend(title="source words", fontsize=7)
    fig.suptitle(
        "how the gap between short and long sentences opens during training "
        "(per update: wall-clock minutes depend on the machine's load)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def read_history(folder: Path) -> list[dict]:
    """A cell's validations, one per step in step order (``val_history.jsonl``; empty when it has none).

    A run resumed from ``last.ckpt`` validates again at the steps it had passed after that checkpoint, and
    appends them: the later record of a step is the one that belongs to the finished run.
    """
    file = folder / VAL_HISTORY
    if not file.is_file():
        return []
    by_step = {}
    for line in file.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_step[record["step"]] = record
    return sorted(by_step.values(), key=lambda record: record["step"])


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def length_penalty_table(out: Path, cells: pd.DataFrame) -> str:
    """Markdown: per cell that searched it (``length_penalty.json``), the dev BLEU at each length penalty α,
    the α chosen, and the test BLEU and output length with the protocol's α and with the chosen one, overall
    and in the buckets from 31 words on: how much of the loss on long sentences the search's."""
    records = {}
    for _, cell in cells.sort_values(["model", "seed"], key=lambda c: c.astype(str)).iterrows():
        path = out / "cells" / cell.cell / LENGTH_PENALTY
        if path.is_file():
            records[(cell.model, cell.seed, cell.cell)] = read_json(path)
    if not records:
        return ""
    long = [b for b in buckets(DEFAULT_BUCKETS) if b.lo > 30 and b.hi is not None and b.hi <= 50]  # 31-40, 41-50
    head = ["model", "seed", "dev BLEU per α", "α chosen", "test BLEU", *(f"{b.label}" for b in long), "length"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, seed, name), record in records.items():
        tested = read_json(out / "cells" / name / "test_results.json")
        before = {"all": tested["overall"], **{b["bucket"]: b for b in tested["buckets"]}}
        after = {"all": record["test"]["overall"], **{b["bucket"]: b for b in record["test"]["buckets"]}}
        dev = ", ".join(f"{d['alpha']:g}: {d['bleu']:.1f}" for d in record["dev"])
        pairs = [f"{before[k]['bleu']:.1f} → {after[k]['bleu']:.1f}" for k in ("all", *(b.label for b in long))]
        length = f"{before['all']['length_ratio']:.2f} → {after['all']['length_ratio']:.2f}"
        lines.append(f"| {model} | {seed} | {dev} | {record['alpha']:g} | " + " | ".join([*pairs, length]) + " |")
    return "\n".join(lines)


def dev_table(out: Path, cells: pd.DataFrame, metric: str = "bleu") -> str:
    """Markdown: per cell, the dev score at its last validation and at its best one, and how saturated its
    attention was at the last validation (overall; per head for multi-head models)."""
    lines = ["| model | seed | updates | dev BLEU (last) | best dev BLEU (at update) | rows > 0.99 | median score "
             "range (nats) | per head: rows > 0.99 / range |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, cell in cells.sort_values(["model", "seed"], key=lambda c: c.astype(str)).iterrows():
        history = [h for h in read_history(out / "cells" / cell.cell) if metric in h["overall"]]
        if not history:
            continue
        last, best = history[-1]["overall"], max(history, key=lambda h: h["overall"][metric])
        heads = sorted(k for k in last if k.startswith("attn_saturated_h"))
        per_head = ", ".join(f"{last[k]:.2f} / {last[k.replace('attn_saturated', 'score_range')]:.0f}" for k in heads)
        lines.append(f"| {cell.model} | {cell.seed} | {history[-1]['step']:,} | {last[metric]:.1f} | "
                     f"{best['overall'][metric]:.1f} ({best['step']:,}) | {_fmt(last.get('attn_saturated'), 2)} | "
                     f"{_fmt(last.get('score_range'))} | {per_head or '-'} |")  # fmt: skip
    return "\n".join(lines) if len(lines) > 2 else ""


def plot_learning_curves(
    out: Path, cells: pd.DataFrame, path: Path, metric: str = "bleu", styles: Optional[dict] = None,
    panels: Optional[dict[str, list[str]]] = None,
) -> Optional[Path]:  # fmt: skip
    """Dev score, the share of saturated attention rows and (where validations logged it) the output's length
    against updates, one line per cell. With ``panels`` (:func:`panel_models`), a row of those plots per panel,
    each column on one scale, so that a grid's second seeds do not crowd one plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    histories = {(c.model, c.seed): read_history(out / "cells" / c.cell) for _, c in cells.iterrows()}
    histories = {k: h for k, h in histories.items() if h}
    if not histories:
        return None
    lengths = any("length_ratio" in h["overall"] for history in histories.values() for h in history)
    ordered = sorted(histories.items(), key=lambda kv: bottleneck_last(kv[0]))  # the bottleneck last
    models = list(dict.fromkeys(model for (model, _), _ in ordered))
    layout = panel_models(models, panels)
    columns = 3 if lengths else 2
    fig, axes = plt.subplots(len(layout), columns, figsize=(6 * columns, 4.4 * len(layout)), sharex=True,
                             sharey="col", squeeze=False)  # fmt: skip
    styles = styles or curve_styles(models)
    seeds = sorted({seed for _, seed in histories}, key=str)
    markers = {seed: ".x+^v"[k % 5] for k, seed in enumerate(seeds)}  # a model's seeds share its style
    for row, (heading, drawn) in zip(axes, layout):
        for (model, seed), history in ordered:
            if model not in drawn:
                continue
            style = {**styles[model], "marker": markers[seed]}
            points = [(h["step"], h["overall"][metric]) for h in history if metric in h["overall"]]
            if points:
                row[0].plot(*zip(*points), label=f"{model} (seed {seed})", **style)
            for ax, key in zip(row[1:], ("attn_saturated", "length_ratio")):
                values = [(h["step"], h["overall"][key]) for h in history if key in h["overall"]]
                if values and points:
                    ax.plot(*zip(*values), **style)
        row[0].set_ylabel(f"dev {title(metric)} (greedy)")
        row[1].set_ylabel(f"attention rows with a weight above {SATURATED}")
        if lengths:  # below 1 the outputs stop early (BLEU's brevity penalty)
            row[2].set_ylabel("dev output length / reference length")
            row[2].axhline(1.0, color="grey", linewidth=0.8)
        if heading:
            row[0].set_title(heading, fontsize=9, loc="left")
        for ax in row:
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("updates")
    fig.suptitle(
        "learning curves on dev: quality, how much of the attention has stopped learning"
        + (", and how long the outputs are" if lengths else ""),
        fontsize=10,
    )
    fig.tight_layout()
    legend_below(fig, list(axes[:, 0]), ncol=3, fontsize=7)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def write_length_study(
    out: Path,
    df: pd.DataFrame,
    edges: Sequence[int] = DEFAULT_BUCKETS,
    panels: Optional[dict[str, list[str]]] = None,
    compare: Sequence[str | Sequence[str]] = (),
) -> tuple[list[Path], str]:
    """The files listed in the module docstring, and the markdown for ``summary.md`` ('' without translations);
    ``panels``: the grid file's split of the length figures (:func:`panel_models`); ``compare``: the pairs its
    paired-test table shows (:func:`compared_pairs`; every pair without it, and in ``significance.csv``)."""
    cells = _cell_models(df)
    cells = cells[[(out / "cells" / c / TRANSLATIONS).is_file() for c in cells.cell]]
    if cells.empty:
        return [], ""
    rows, saved = [], {}
    for _, cell in cells.iterrows():
        stats, saved[cell.cell] = cell_statistics(out / "cells" / cell.cell, edges)
        rows += [{"cell": cell.cell, "model": cell.model, "seed": cell.seed, **r} for r in stats]
    stats = pd.DataFrame(rows)
    sig = pd.DataFrame(significance(cells, saved, edges))
    caps = training_caps(df)
    styles = curve_styles(sorted(cells.model.unique()))  # one look per model in every figure
    written = [
        write_csv(out / "statistics.csv", rows, list(rows[0]), digits=STAT_DIGITS),
        plot_length_curve(stats, out / "length_curve.png", caps=caps, styles=styles, panels=panels),
        plot_length_curve(stats, out / "ratio_curve.png", caps=caps, styles=styles, ratio=True, panels=panels),
    ]
    if not sig.empty:
        sig_rows = sig.to_dict("records")
        written.append(write_csv(out / "significance.csv", sig_rows, list(sig.columns), digits=STAT_DIGITS))
    gap = plot_training_gap(out, cells, out / "training_gap.png")
    curves = plot_learning_curves(out, cells, out / "learning_curves.png", styles=styles, panels=panels)
    written += [p for p in (gap, curves) if p]
    parts = ["", "## Test BLEU and chrF per source length, with 95% bootstrap intervals", "",
             "Mean ± std over seeds, then [the lowest lower and highest upper bound of the seeds' 95% intervals]"
             " (1,000 seeded bootstrap resamples of the test sentences); bucket sizes in brackets."]  # fmt: skip
    for metric in TEXT_METRICS:
        parts += ["", f"### {title(metric)}", "", _table(stats, metric)]
    ratios = ratio_table(stats, caps)
    if ratios:
        parts += ["", "### Test BLEU per bucket as a multiple of the model's 11-20-word BLEU", "",
                  "Mean over seeds, then [the lowest lower and highest upper bound of the seeds' 95% bootstrap "
                  f"intervals of the ratio] ({RESAMPLES:,} resamples of each bucket's test sentences, the two "
                  "buckets resampled on their own); † beyond the longest training sentence.", "",
                  ratios]  # fmt: skip
    beyond = beyond_cap(cells, saved, caps, edges)
    answer = beyond_cap_table(beyond["bleu"], length=beyond["length_ratio"], precision=beyond["bleu_precision"])
    if answer:
        parts += ["", "### Beyond the training cap: Fig. 2's question", "",
                  "Test BLEU on all sentences longer than the model's training cap, as a multiple of its "
                  f"{REFERENCE}-word BLEU (mean over seeds), with [the seeds' lowest and highest 95% bound of that "
                  "ratio]; the reading says what the interval allows: ≤ 0.5× (Bahdanau et al.'s collapse), "
                  "≥ 0.8× (quality kept), or neither. BLEU is its brevity penalty times its n-gram precision "
                  "part, so the last two columns say why it falls: the output's length as a share of the "
                  f"reference's (beyond the cap, and at {REFERENCE} words), and BLEU without its brevity penalty "
                  "as the same multiple. A model whose precision part holds while its output shrinks translates "
                  "what it writes as well as before but stops too early.", "", answer]  # fmt: skip
    precision = ratio_table(stats, caps, metric="bleu_precision")
    if precision:
        parts += ["", "### Why BLEU falls with length: output length or n-gram precision", "",
                  "BLEU = brevity penalty × the n-gram precisions' geometric mean. The output's length as a share "
                  "of the reference's per bucket (mean over seeds [the seeds' 95% bounds]; below 1 the brevity "
                  f"penalty costs BLEU), then BLEU without its brevity penalty as a multiple of the model's "
                  f"{REFERENCE}-word value (as the ratio table above). A shorter output can be more precise: read "
                  "the two together.", "", _table(stats, "length_ratio", digits=2), "", precision]  # fmt: skip
    searched = length_penalty_table(out, cells)
    if searched:
        parts += ["", "### The search's share: the length penalty tuned on dev", "",
                  "The protocol tests with beam 5 and length penalty α = 0.6 (the headline everywhere above). After "
                  "that test, each cell decoded dev with the same beam at each α, kept the α with the best dev BLEU "
                  "and tested with it too: test BLEU with the protocol's α → with the chosen one, overall and in "
                  "the buckets beyond 30 words, and the output's length over the reference's.", "",
                  searched]  # fmt: skip
    dev = dev_table(out, cells)
    if dev:
        parts += ["", "## Dev: the last and the best validation, and the attention's saturation", "",
                  "Greedy decoding of the dev split; rows > 0.99: the share of attention rows (target steps with "
                  "at least two source positions) whose largest weight is above 0.99; score range: the median of "
                  "the largest minus the smallest energy of a row.", "", dev]  # fmt: skip
    if not sig.empty:
        pairs = compared_pairs(sorted(cells.model.unique(), key=bottleneck_last), compare) if compare else None
        tested = len(sig.drop_duplicates(["model_a", "model_b"]))
        shown = (f"The pairs the grid file's `compare:` names ({len(pairs)} of the {tested} tested; significance.csv "
                 "holds them all). " if pairs is not None else "")  # fmt: skip
        parts += ["", "### Paired tests (BLEU)", "",
                  f"{shown}Difference B − A (mean over seeds), then the largest p-value over seeds of the paired "
                  f"bootstrap and of approximate randomisation ({RESAMPLES:,} resamples and trials, sacreBLEU's "
                  "seed); n.s. = either p ≥ 0.05; seeds disagree = the difference changes sign from seed to seed "
                  "(not significant either).", "",
                  _significance_table(sig, "bleu", pairs)]  # fmt: skip
    return written, "\n".join(parts)
