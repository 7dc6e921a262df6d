"""The length study's statistics and figures from saved cells alone (no checkpoints, no training)."""

import json
import random
import re

import numpy as np
import pandas as pd
import pytest

from seq2seq_attn.ablation.length_study import STAT_DIGITS, read_history
from seq2seq_attn.ablation.report import write_report, write_results_csv
from seq2seq_attn.metrics import DEFAULT_BUCKETS
from seq2seq_attn.plots import curve_styles
from seq2seq_attn.results import TRANSLATIONS, write_csv, write_json, write_jsonl_gz

WORDS = "in the beginning god created heavens and earth was without form void darkness on face of deep".split()


def fake_cell(out, name, overrides, quality: float, seed: int):
    """A finished cell: translations of one test set whose words are right with probability ``quality``;
    the bottleneck's are worse beyond 30 words and the same as the attention model's up to 30 (per seed).
    Also a validation history and the result files the runner writes."""
    folder = out / "cells" / name
    rows = []
    for i in range(240):
        n = 3 + i % 70
        ref = [random.Random(1000 * i + j).choice(WORDS) for j in range(n)]
        keep = quality * (0.3 if overrides["model.flow"] == "none" and n > 30 else 1.0)
        noise = random.Random(seed * 100_000 + i)
        hyp = [w if noise.random() < keep else noise.choice(WORDS) for w in ref]
        rows.append({"index": i, "src_len": n, "hyp": " ".join(hyp), "ref": " ".join(ref)})
    write_jsonl_gz(folder / TRANSLATIONS, rows)
    write_json(folder / "cell.json", {"name": name, "overrides": overrides})
    write_json(folder / "result.json", {"overall": {"count": 240.0, "bleu": 1.0}, "buckets": [], "meta": {}})
    saturation = {"attn_saturated": 0.25 * seed, "score_range": 10.0 * seed}
    history = [{"step": s, "epoch": 0, "seconds": 60.0 * s, "overall": {"bleu": s + (s == 2) * seed, **saturation},
                "buckets": [{"bucket": "1-10", "lo": 1, "hi": 10, "bleu": 2.0 * s},
                            {"bucket": "41-50", "lo": 41, "hi": 50, "bleu": s / 2}]} for s in (1, 2, 3)]  # fmt: skip
    (folder / "val_history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))


def drawn_figure(draw):
    """The figure that ``draw()`` would save, captured instead of written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    captured = {}
    save = plt.Figure.savefig
    plt.Figure.savefig = lambda fig, *args, **kwargs: captured.setdefault("fig", fig)
    try:
        draw()
    finally:
        plt.Figure.savefig = save
    return captured["fig"]


def test_the_report_of_a_length_study_has_intervals_tests_and_figures(tmp_path):
    for seed in (1, 2):
        fake_cell(tmp_path, f"none{seed}", {"model.flow": "none", "model.attention": "none", "seed_everything": seed},
                  0.8, seed)  # fmt: skip
        fake_cell(tmp_path, f"add{seed}", {"model.flow": "bahdanau", "model.attention": "additive",
                  "seed_everything": seed}, 0.8, seed)  # fmt: skip
    write_results_csv(tmp_path)
    written = {p.name for p in write_report(tmp_path, "bleu")}
    figures = {"length_curve.png", "ratio_curve.png", "training_gap.png", "learning_curves.png"}
    assert {"statistics.csv", "significance.csv", *figures} <= written

    stats = pd.read_csv(tmp_path / "statistics.csv")
    assert set(stats.metric) == {"bleu", "chrf", "bleu_precision", "length_ratio"} and len(stats.cell.unique()) == 4
    # the fakes swap words, never drop them: every output is as long as its reference, and the bottleneck's
    # loss beyond 30 words is all n-gram precision
    assert (stats[stats.metric == "length_ratio"].score == 1.0).all()
    # BLEU = brevity penalty (from the length ratio) × precision part, in every cell and bucket
    wide = stats.pivot_table(index=["cell", "bucket"], columns="metric", values="score")
    penalty = np.minimum(1.0, np.exp(1 - 1 / wide.length_ratio))
    assert np.allclose(wide.bleu, wide.bleu_precision * penalty, atol=1e-9)
    part = stats[(stats.metric == "bleu_precision") & stats.cell.str.startswith("none")].set_index(["cell", "bucket"])
    assert (part.ratio.xs("41-50", level="bucket") < 0.5).all() and (part.ratio.xs("21-30", level="bucket") > 0.8).all()
    assert (stats.ci_low <= stats.score).all() and (stats.score <= stats.ci_high).all()
    # each bucket as a multiple of the cell's 11-20 bucket, with an interval; 11-20 itself exactly 1
    buckets = stats[stats.bucket != "all"].merge(
        stats[stats.bucket == "11-20"][["cell", "metric", "score"]], on=["cell", "metric"], suffixes=("", "_ref")
    )
    assert stats[stats.bucket == "all"].ratio.isna().all()
    assert (buckets.ratio - buckets.score / buckets.score_ref).abs().max() < 1e-8  # the CSV keeps 10 digits
    reference, others = buckets[buckets.bucket == "11-20"], buckets[buckets.bucket != "11-20"]
    assert (reference[["ratio", "ratio_low", "ratio_high"]] == 1).all().all()
    assert (others[others.metric != "length_ratio"].eval("ratio_low < ratio_high")).all()  # lengths all equal here
    assert set(stats[stats.bucket != "all"].lo) <= {1, *(e + 1 for e in DEFAULT_BUCKETS)}
    sig = pd.read_csv(tmp_path / "significance.csv")
    long = sig[(sig.metric == "bleu") & (sig.lo >= 41)]
    short = sig[(sig.metric == "bleu") & (sig.lo <= 21)]  # buckets up to 30 words
    # attention minus the bottleneck: large and significant on long sentences, nothing on short ones
    assert (long.delta_b_minus_a > 10).all() and (long.p_value < 0.01).all() and (long.p_value_ar < 0.01).all()
    assert (short.delta_b_minus_a == 0).all() and (short.p_value == 1.0).all() and (short.p_value_ar == 1.0).all()
    summary = (tmp_path / "summary.md").read_text()
    assert "95% bootstrap intervals" in summary and "Paired tests (BLEU)" in summary and "(n.s.)" in summary
    assert "approximate randomisation" in summary
    assert "Why BLEU falls with length" in summary and "| 1.00 ± 0.00 [1.00, 1.00] |" in summary
    assert "intervals of the ratio" in summary and "| 1.00× [1.00, 1.00] |" in summary
    assert re.search(r"\| 0\.\d\d× \[0\.\d\d, \d\.\d\d\] \|", summary)  # a bucket below 11-20's level
    # dev: the last validation (update 3, BLEU 3) and the best (update 2: BLEU 2 + seed), with the saturation
    assert "| bahdanau + additive | 1 | 3 | 3.0 | 3.0 (2) | 0.25 | 10.0 | - |" in summary
    assert "| bahdanau + additive | 2 | 3 | 3.0 | 4.0 (2) | 0.50 | 20.0 | - |" in summary


def test_statistics_tables_read_the_same_where_a_float_sums_last_bit_differs(tmp_path):
    """0.1 + 0.2 and 0.3 differ in the last bit, as a bootstrap sum may on another machine; rounded to the
    study's digits both write one file, while integers, text, missing values and float32s keep their meaning."""
    files = []
    for value in (0.1 + 0.2, 0.3):
        rows = [{"cell": "a", "seed": 2, "bleu": value, "lo": np.float32(1 / 3), "p": None}]
        files.append(write_csv(tmp_path / f"{value!r}.csv", rows, list(rows[0]), digits=STAT_DIGITS).read_text())
    assert files[0] == files[1] == "cell,seed,bleu,lo,p\na,2,0.3,0.3333333433,\n"
    unrounded = [
        write_csv(tmp_path / f"raw{i}.csv", [{"bleu": v}], ["bleu"]).read_text() for i, v in enumerate((0.1 + 0.2, 0.3))
    ]
    assert unrounded[0] != unrounded[1]


def test_degradation_figures_axis_labels_stay_beside_their_plots():
    from seq2seq_attn.ablation.report import degradation_figure

    rows = [{"cell": f, "model": f"{f} + dot", "flow": f, "bucket": b, "lo": lo, "metric": m, "value": v,
             "extrapolation": False, "baseline": False, "seed_everything": 1}
            for f in ("bahdanau", "luong") for b, lo in (("1-10", 1), ("11-20", 11))
            for m, v in (("exact_match", 0.9), ("align_acc", 0.8), ("align_lag1_acc", 0.7))]  # fmt: skip
    fig = degradation_figure(pd.DataFrame(rows), "exact_match", "toy: quality vs source length")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert len(fig.axes) == 2 and "own convention" in fig.axes[1].get_ylabel()  # the longest label there is
    for ax in fig.axes:  # the label no taller than its plot: it runs into neither the heading nor the legend
        assert ax.yaxis.label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height


def test_paired_tests_are_significant_only_when_every_seed_agrees_on_the_sign():
    from seq2seq_attn.ablation.length_study import _significance_table

    def rows(deltas, p):  # one row per seed of the pair "a", "b" in bucket "all"
        return [{"model_a": "a", "model_b": "b", "seed": seed, "bucket": "all", "lo": float("nan"), "metric": "bleu",
                 "delta_b_minus_a": d, "p_value": p, "p_value_ar": p} for seed, d in enumerate(deltas, 1)]  # fmt: skip

    agree = _significance_table(pd.DataFrame(rows([2.0, 1.0], 0.001)), "bleu")
    assert "| b − a | +1.5, p ≤ 0.001 / 0.001 |" in agree
    split = _significance_table(pd.DataFrame(rows([3.0, -1.0], 0.001)), "bleu")  # each seed alone significant
    assert "| b − a | +1.0, p ≤ 0.001 / 0.001 (seeds disagree) |" in split
    weak = _significance_table(pd.DataFrame(rows([2.0, 1.0], 0.2)), "bleu")
    assert "| b − a | +1.5, p ≤ 0.200 / 0.200 (n.s.) |" in weak


def test_compare_names_each_pair_once_a_pattern_against_every_model_or_a_pair_of_patterns():
    from seq2seq_attn.ablation.length_study import compared_pairs

    models = ["bahdanau + additive", "luong + dot", "luong + general", "transformer", "none (no attention)"]
    pairs = compared_pairs(models, ["luong + general", ["luong + dot", "bahdanau + *"], ["luong + *", "transformer"]])
    assert pairs == [
        ("luong + general", "bahdanau + additive"),  # the pattern's model is A, every other model B
        ("luong + general", "luong + dot"),
        ("luong + general", "transformer"),
        ("luong + general", "none (no attention)"),
        ("luong + dot", "bahdanau + additive"),  # a pair of patterns: A from the first, B from the second
        ("luong + dot", "transformer"),  # (luong + general, transformer) is listed already
    ]
    assert compared_pairs(models, ["lstm*"]) == []  # a pattern that names no model adds no pair


def test_a_pair_shown_the_other_way_round_changes_its_sign_and_keeps_its_p_values():
    from seq2seq_attn.ablation.length_study import _significance_table

    seeds = ((1, 2.0, 0.01), (2, 1.0, 0.02))  # seed, difference, p
    rows = [{"model_a": "a", "model_b": "b", "seed": seed, "bucket": "all", "lo": float("nan"), "metric": "bleu",
             "delta_b_minus_a": d, "p_value": p, "p_value_ar": 2 * p} for seed, d, p in seeds]  # fmt: skip
    sig = pd.DataFrame(rows)
    assert "| b − a | +1.5, p ≤ 0.020 / 0.040 |" in _significance_table(sig, "bleu")
    flipped = _significance_table(sig, "bleu", pairs=[("b", "a"), ("a", "c")])  # no test of a with c: no row
    assert "| a − b | -1.5, p ≤ 0.020 / 0.040 |" in flipped and "b − a" not in flipped
    assert len(flipped.splitlines()) == 3  # the header, its rule, one pair


def test_the_summary_shows_the_pairs_the_grid_file_compares_and_significance_csv_all_of_them(tmp_path):
    for name, flow, attention in (("none", "none", "none"), ("add", "bahdanau", "additive"), ("dot", "luong", "dot")):
        overrides = {"model.flow": flow, "model.attention": attention, "seed_everything": 1}
        fake_cell(tmp_path, name, overrides, 0.8 if name != "dot" else 0.7, 1)
    (tmp_path / "grid.yaml").write_text("name: x\ngrid: {model.flow: [luong]}\ncompare: ['bahdanau + additive']\n")
    write_results_csv(tmp_path)
    write_report(tmp_path, "bleu")
    summary = (tmp_path / "summary.md").read_text()
    table = summary[summary.index("### Paired tests (BLEU)") :].split("\n## ")[0]
    assert "The pairs the grid file's `compare:` names (2 of the 3 tested; significance.csv holds them all)" in table
    shown = re.findall(r"^\| ([^|]+ − [^|]+) \|", table, flags=re.M)
    assert shown == ["B − A", "luong + dot − bahdanau + additive", "none (no attention) − bahdanau + additive"]
    sig = pd.read_csv(tmp_path / "significance.csv")
    assert len(sig.drop_duplicates(["model_a", "model_b"])) == 3
    # the bottleneck was tested as A (it sorts first): shown the other way round, its differences change sign
    tested = sig[(sig.model_b == "bahdanau + additive") & (sig.bucket == "41-50") & (sig.metric == "bleu")]
    row = next(line for line in table.splitlines() if line.startswith("| none (no attention) − "))
    assert row.split(" | ")[1 + 5].startswith(f"{-tested.delta_b_minus_a.iloc[0]:+.1f}, ")  # column 41-50


def test_summary_says_how_many_seeds_each_model_has_while_a_grid_is_unfinished():
    from seq2seq_attn.ablation.report import seeds_per_model

    def frame(seeds):  # seeds: model -> its seeds
        return pd.DataFrame([{"model": m, "seed_everything": s} for m, ss in seeds.items() for s in ss])

    assert seeds_per_model(frame({"a": [1, 2], "b": [1]})) == "1 to 2 seeds"
    assert seeds_per_model(frame({"a": [1, 2], "b": [2, 1]})) == "2 seeds"
    assert seeds_per_model(frame({"a": [7]})) == "1 seed"
    assert seeds_per_model(pd.DataFrame({"model": ["a", "b"]})) == "1 seed"  # a grid without a seed axis


def test_training_table_names_each_cells_cpu_and_its_bf16_instructions(tmp_path):
    from seq2seq_attn.ablation.report import convergence_table

    machines = {"zen4": ("AMD EPYC (family 25, model 17)", ["avx512_bf16", "avx512f"]),
                "zen3": ("AMD EPYC (family 25, model 1)", []), "old": None}  # fmt: skip
    for cell, machine in machines.items():
        folder = tmp_path / "cells" / cell
        folder.mkdir(parents=True)
        result = {"stopped_by": "patience", "steps": 800, "best_step": 400, "train_seconds": 600.0,
                  "fit_seconds": 650.0, "precision": "32-true"}  # fmt: skip
        (folder / "result.json").write_text(json.dumps(result))
        if machine:  # "old": a cell published without its environment.json
            (folder / "environment.json").write_text(json.dumps({"cpu": {"model": machine[0], "flags": machine[1]}}))
    table = convergence_table(tmp_path).splitlines()
    rows = {line.split(" | ")[0].strip("|` "): line for line in table[2:] if line.startswith("|")}
    assert rows["zen4"].endswith("| 32-true | AMD EPYC (family 25, model 17), AVX-512 BF16 |")
    assert rows["zen3"].endswith("| AMD EPYC (family 25, model 1), no bf16 instructions |")
    assert rows["old"].endswith("| 10 | - | 32-true | - |")  # 600 s of training; no test time recorded


def test_training_table_adds_up_the_grids_machine_time(tmp_path):
    from seq2seq_attn.ablation.report import convergence_table

    for cell, (train, test) in {"a": (5400.0, 300.0), "b": (3600.0, 60.0), "c": (None, 120.0)}.items():
        folder = tmp_path / "cells" / cell
        folder.mkdir(parents=True)
        result = {"stopped_by": "patience", "steps": 800, "best_step": 400, "fit_seconds": 1800.0,
                  "test_seconds": test}  # fmt: skip
        if train is not None:  # "c": a cell from before train_seconds was recorded counts its fit_seconds
            result["train_seconds"] = train
        (folder / "result.json").write_text(json.dumps(result))
    table = convergence_table(tmp_path).splitlines()
    assert table[2].startswith("| `a` | patience | 800 | 400 | 90 | 5 |")
    assert table[-1].startswith("Total: 3 cells, 3.0 hours of training and 8 minutes of testing")


def test_alignment_is_drawn_against_each_flows_own_convention():
    from seq2seq_attn.ablation.report import with_own_alignment

    values = {("bahdanau", "align_acc"): 0.05, ("bahdanau", "align_lag1_acc"): 0.98,
              ("luong", "align_acc"): 0.99, ("luong", "align_lag1_acc"): 0.04}  # fmt: skip
    df = pd.DataFrame(
        [
            {"cell": flow[0], "flow": flow, "metric": metric, "value": v, "bucket": "all"}
            for (flow, metric), v in values.items()
        ]
    )
    own = with_own_alignment(df)
    flow_rows = own[own.metric == "align_flow"].set_index("cell")["value"]
    assert flow_rows.to_dict() == {"b": 0.98, "l": 0.99}


def test_training_caps_come_from_the_extrapolation_flags(tmp_path):
    from seq2seq_attn.ablation.length_study import plot_length_curve, ratio_table, training_caps

    rows = [{"model": m, "bucket": b, "lo": lo, "extrapolation": (lo or 0) > cap, "metric": "bleu", "value": 1.0}
            for m, cap in (("rnnsearch, train_max_words=30", 30), ("rnnsearch, train_max_words=50", 50))
            for b, lo in (("all", None), ("21-30", 21), ("31-40", 31), ("51-60", 51))]  # fmt: skip
    rows += [{"model": "uncapped", "bucket": "31-40", "lo": 31, "extrapolation": False, "metric": "bleu", "value": 1}]
    caps = training_caps(pd.DataFrame(rows))
    assert caps == {"rnnsearch, train_max_words=30": 30, "rnnsearch, train_max_words=50": 50}
    stats = pd.DataFrame([{"model": r["model"], "bucket": r["bucket"], "lo": r["lo"], "metric": "bleu", "score": 10.0,
                           "ci_low": 9.0, "ci_high": 11.0} for r in rows if r["bucket"] != "all"])  # fmt: skip
    assert plot_length_curve(stats, tmp_path / "curve.png", caps=caps).stat().st_size > 0
    stats.loc[stats.bucket == "31-40", "score"] = 4.0  # 0.4x the 21-30 bucket's 10
    table = ratio_table(stats, caps, reference="21-30")
    assert "| rnnsearch, train_max_words=30 | 1.00× | 0.40× † | 1.00× † |" in table
    assert "| rnnsearch, train_max_words=50 | 1.00× | 0.40× | 1.00× † |" in table
    assert "| uncapped | - | 0.40× | - |" not in table and "| uncapped | - | - | - |" in table  # no 21-30 bucket


def test_training_caps_are_the_recorded_longest_training_sentence():
    from seq2seq_attn.ablation.length_study import training_caps

    rows = [{"model": m, "bucket": b, "lo": lo, "extrapolation": (lo or 0) > cap, "train_max_length": cap,
             "metric": "bleu", "value": 1.0}
            for m, cap in (("capped at 25", 25), ("longest sentence 86", 86))
            for b, lo in (("all", None), ("21-30", 21), ("31-40", 31), ("51-60", 51))]  # fmt: skip
    # 25 is inside the 21-30 bucket, whose flag stays off: the flags alone would say 30
    assert training_caps(pd.DataFrame(rows)) == {"capped at 25": 25}


def test_seeds_read_back_as_floats_are_labelled_as_integers_and_a_missing_seed_as_a_dash():
    import pandas as pd

    from seq2seq_attn.ablation.length_study import _cell_models

    df = pd.DataFrame({"cell": ["a", "a", "peer"], "model": ["m", "m", "p"], "baseline": [False] * 3,
                       "seed_everything": [1.0, 1.0, float("nan")]})  # fmt: skip
    assert list(_cell_models(df).seed) == [1, "-"]


def test_a_resumed_cell_history_keeps_one_validation_per_step_the_later_one(tmp_path):
    # killed after validating at 600 but before last.ckpt at 600: the resumed run validates 600 again
    steps = [(200, 1.0), (400, 2.0), (600, 3.0), (600, 3.5), (800, 4.0)]
    (tmp_path / "val_history.jsonl").write_text(
        "".join(json.dumps({"step": step, "overall": {"bleu": bleu}}) + "\n" for step, bleu in steps)
    )
    history = read_history(tmp_path)
    assert [h["step"] for h in history] == [200, 400, 600, 800]
    assert history[2]["overall"]["bleu"] == 3.5
    assert read_history(tmp_path / "missing") == []


def test_curve_styles_tell_every_model_and_cap_apart_as_fig_2_does():
    capped = ["none (no attention), train_max_words=30", "none (no attention), train_max_words=50",
              "bahdanau + additive, train_max_words=30", "bahdanau + additive, train_max_words=50",
              "transformer, train_max_words=50"]  # fmt: skip
    styles = curve_styles(capped)
    assert len({(s["color"], s["ls"]) for s in styles.values()}) == len(capped)  # no two curves alike
    bottleneck = [styles[m] for m in capped[:2]]
    assert all(s["color"] == "black" for s in bottleneck) and [s["ls"] for s in bottleneck] == ["--", "-"]
    additive = [styles[m] for m in capped[2:4]]
    assert additive[0]["color"] == additive[1]["color"] != "black" and [s["ls"] for s in additive] == ["--", "-"]
    assert styles[capped[4]]["color"] not in ("black", additive[0]["color"]) and styles[capped[4]]["ls"] == "-"
    # one cap: the bottleneck is the dashed black baseline, attention models solid in their own colours
    single = curve_styles(["none (no attention)", "luong + dot", "luong + general"])
    assert single["none (no attention)"] == {"color": "black", "ls": "--"}
    assert single["luong + dot"]["ls"] == single["luong + general"]["ls"] == "-"
    assert single["luong + dot"]["color"] != single["luong + general"]["color"]


def test_curve_styles_stay_apart_for_many_families_and_an_uncapped_model():
    families = [f"luong + general, hidden={h}" for h in range(12)]  # more families than colours
    styles = curve_styles(["none (no attention)", "none (no attention), cell=lstm", *families])
    assert styles["none (no attention)"] == {"color": "black", "ls": "--"}
    assert styles["none (no attention), cell=lstm"]["color"] != "black"  # a second bottleneck is not the baseline
    assert all(styles[f]["color"] != "grey" for f in families)  # the palette cycles, never a catch-all grey
    # a model trained on every length is its family's longest cap: solid; the capped one dashed
    mixed = curve_styles(["bahdanau + additive", "bahdanau + additive, train_max_words=30"])
    assert mixed["bahdanau + additive"]["ls"] == "-" and mixed["bahdanau + additive, train_max_words=30"]["ls"] == "--"


def test_beyond_cap_reads_fig_2s_question_from_the_ratios_interval():
    import numpy as np

    from seq2seq_attn.ablation.length_study import beyond_cap, beyond_cap_table

    def mean_of(summed):  # statistics (value, 1) per sentence: the score is the mean value
        return float(summed[0] / summed[1])

    rng = np.random.default_rng(0)
    src_len = np.array([15] * 400 + [45] * 200)  # 400 sentences of 11-20 words, 200 of 41-50

    def cell(short: float, long: float) -> dict:  # Bernoulli values: the mean is the score
        values = np.concatenate([rng.random(400) < short, rng.random(200) < long]).astype(float)
        return {"src_len": src_len, "stats": {"bleu": np.stack([values, np.ones_like(values)], axis=1)}}

    saved = {"enc": cell(0.6, 0.15), "search": cell(0.6, 0.57), "mid": cell(0.6, 0.39), "free": cell(0.6, 0.1)}
    cells = pd.DataFrame({"cell": list(saved), "model": ["rnnenc-30", "rnnsearch-30", "mid-30", "uncapped"],
                          "seed": [1, 1, 1, 1]})  # fmt: skip
    caps = {"rnnenc-30": 30, "rnnsearch-30": 30, "mid-30": 30}  # "uncapped" was trained on every length
    rows = beyond_cap(cells, saved, caps, DEFAULT_BUCKETS, scorers={"bleu": mean_of})["bleu"]
    assert [r["model"] for r in rows] == ["rnnenc-30", "rnnsearch-30", "mid-30"] and all(
        r["count"] == 200 for r in rows
    )
    enc = rows[0]
    assert enc["ratio"] == pytest.approx(enc["score"] / enc["reference"]) and enc["ratio_low"] < enc["ratio_high"]
    table = beyond_cap_table(rows)
    assert "| rnnenc-30 | 30 | 200 |" in table and table.count("falls to ≤ 0.5×") == 1
    assert "| rnnsearch-30 |" in table and table.count("keeps ≥ 0.8×") == 1
    assert "| mid-30 |" in table and "neither bound settles it" in table  # about 0.65x: the interval decides nothing
    assert beyond_cap_table([]) == ""


def test_beyond_cap_tells_an_output_that_stops_early_from_one_that_translates_worse():
    import numpy as np

    from seq2seq_attn.ablation.length_study import beyond_cap, beyond_cap_table
    from seq2seq_attn.stats import sentence_statistics

    rng = np.random.default_rng(3)
    refs = [" ".join(rng.choice(WORDS, size=n)) for n in [15] * 150 + [45] * 150]
    src_len = np.array([15] * 150 + [45] * 150)
    words = [r.split() for r in refs]
    outputs = {  # exact up to 20 words; beyond: the first half of the reference, or every word replaced
        "early": [r if n == 15 else " ".join(w[: len(w) // 2]) for r, w, n in zip(refs, words, src_len)],
        "worse": [r if n == 15 else " ".join(rng.choice(WORDS, size=len(w))) for r, w, n in zip(refs, words, src_len)],
    }  # fmt: skip
    saved = {m: {"src_len": src_len, "stats": {"bleu": sentence_statistics("bleu", hyps, refs)}}
             for m, hyps in outputs.items()}  # fmt: skip
    cells = pd.DataFrame({"cell": list(saved), "model": list(saved), "seed": [1, 1]})
    caps = {"early": 30, "worse": 30}
    rows = beyond_cap(cells, saved, caps, DEFAULT_BUCKETS)
    early, worse = ({r["model"]: r for r in rows[m]} for m in ("length_ratio", "bleu_precision"))
    assert early["early"]["score"] == pytest.approx(0.5, abs=0.02) and early["early"]["reference"] == 1.0
    assert early["worse"]["score"] == 1.0  # as long as the reference, every word wrong
    assert worse["early"]["ratio"] == pytest.approx(1.0) and worse["worse"]["ratio"] < 0.3
    assert all(r["ratio"] < 0.5 for r in rows["bleu"])  # BLEU alone cannot tell the two apart
    table = beyond_cap_table(rows["bleu"], length=rows["length_ratio"], precision=rows["bleu_precision"])
    assert "| output length beyond (11-20) | without the brevity penalty [95%] |" in table
    assert re.search(r"\| early \| 30 \| 150 \| .* \| 0\.[45]\d \(1\.00\) \| 1\.00× \[1\.00, 1\.00\] \|", table)
    assert re.search(r"\| worse \| .* \| 1\.00 \(1\.00\) \| 0\.[0-2]\d× \[", table)


def test_summary_and_figure_mark_each_models_own_extrapolation_and_a_shared_one_in_the_header(tmp_path):
    from seq2seq_attn.ablation.report import extrapolation_marks, plot_degradation, summary_table

    def rows(model, cap):  # BLEU per bucket; flagged beyond the model's cap
        return [{"model": model, "bucket": b, "lo": lo, "metric": "bleu", "value": v, "extrapolation": lo > cap}
                for b, lo, v in (("11-20", 11, 20.0), ("31-40", 31, 15.0), ("51-60", 51, 10.0))]  # fmt: skip

    table = summary_table(pd.DataFrame(rows("m-30", 30) + rows("m-50", 50)), "bleu")
    assert "| model | all | 11-20 | 31-40 | 51-60 † |" in table  # beyond both caps: in the header
    assert "| m-30 | - | **20.000** | **15.000** † | **10.000** |" in table
    assert "| m-50 | - | **20.000** | **15.000** | **10.000** |" in table
    df = pd.DataFrame(rows("m-30", 30) + rows("m-50", 50) + rows("m-all", 60))
    assert extrapolation_marks(df) == ({"m-30": {"31-40", "51-60"}, "m-50": {"51-60"}}, set())  # m-all: none
    assert extrapolation_marks(df[df.model != "m-all"])[1] == {"51-60"}  # shaded in the figure: beyond both caps
    assert extrapolation_marks(df.iloc[:0]) == ({}, set())
    for part in (df, df[df.model != "m-all"]):
        frame = part.assign(cell=part.model, baseline=False, **{"seed_everything": 1})
        assert plot_degradation(frame, "bleu", tmp_path / "degradation.png").stat().st_size > 0


def test_report_command_draws_the_grids_own_metric_unless_told_another(tmp_path):
    from seq2seq_attn.cli import main

    fake_cell(tmp_path, "add1", {"model.flow": "bahdanau", "model.attention": "additive", "seed_everything": 1}, 0.8, 1)
    result = tmp_path / "cells" / "add1" / "result.json"
    result.write_text(result.read_text().replace('"bleu": 1.0', '"bleu": 1.0, "exact_match": 0.5'))
    (tmp_path / "grid.yaml").write_text("name: study\nmetric: bleu\ngrid:\n  - {model.attention: [additive]}\n")
    main(["report", str(tmp_path)])
    sections = re.findall(r"^## (.+)$", (tmp_path / "summary.md").read_text(), flags=re.M)
    assert sections[0] == "BLEU"  # the main table is the grid's metric, not the toy tasks' exact match
    main(["report", str(tmp_path), "--metric", "exact_match"])
    sections = re.findall(r"^## (.+)$", (tmp_path / "summary.md").read_text(), flags=re.M)
    assert sections[0] == "exact match"


def test_report_command_names_the_metrics_it_has_when_told_one_it_lacks(tmp_path, capsys):
    from seq2seq_attn.cli import main

    fake_cell(tmp_path, "add1", {"model.flow": "bahdanau", "model.attention": "additive", "seed_everything": 1}, 0.8, 1)
    (tmp_path / "grid.yaml").write_text("name: study\nmetric: bleu\ngrid:\n  - {model.attention: [additive]}\n")
    main(["report", str(tmp_path)])
    before = (tmp_path / "summary.md").read_text()
    with pytest.raises(SystemExit) as stop:
        main(["report", str(tmp_path), "--metric", "blue"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'blue'" in err[0] and "bleu" in err[0]  # the typo and the names to pick from
    assert (tmp_path / "summary.md").read_text() == before  # the finished report is kept


@pytest.mark.parametrize("damage", ["result.json", "val_history.jsonl", TRANSLATIONS])
def test_a_cell_with_a_damaged_file_is_left_out_with_a_warning_that_names_it(tmp_path, capsys, damage):
    from seq2seq_attn.cli import main

    for seed in (1, 2):
        overrides = {"model.flow": "bahdanau", "model.attention": "additive", "seed_everything": seed}
        fake_cell(tmp_path, f"add{seed}", overrides, 0.8, seed)
    (tmp_path / "grid.yaml").write_text("name: study\nmetric: bleu\ngrid:\n  - {model.attention: [additive]}\n")
    cell = tmp_path / "cells" / "add2"
    (cell / "val_history.jsonl").write_text(
        json.dumps({"step": 4, "seconds": 1.0, "overall": {}, "buckets": []}) + "\n"
    )
    whole = (cell / damage).read_bytes()
    (cell / damage).write_bytes(whole[: len(whole) // 2])  # a copy cut short
    main(["report", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: leaving cell add2 out of the report:")
    assert f"{cell / damage} is damaged" in err[0] and "git checkout --" in err[0]
    assert set(pd.read_csv(tmp_path / "results.csv").cell) == {"add1"}  # the rest is reported
    assert (cell / damage).read_bytes() == whole[: len(whole) // 2]  # and nothing is overwritten


def test_the_precision_probe_refuses_a_thread_count_below_one(capsys):
    from seq2seq_attn.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["precision", "--threads", "0"])
    assert stop.value.code == 2 and "--threads must be >= 1, got 0" in capsys.readouterr().err


def test_learning_curves_draw_the_dev_output_length_where_validations_logged_it(tmp_path):
    import matplotlib.image

    from seq2seq_attn.ablation.length_study import plot_learning_curves

    widths = {}
    for logged in (False, True):
        out = tmp_path / str(logged)
        fake_cell(out, "add1", {"model.flow": "bahdanau", "model.attention": "additive", "seed_everything": 1}, 0.8, 1)
        history = out / "cells" / "add1" / "val_history.jsonl"
        records = [json.loads(line) for line in history.read_text().splitlines()]
        for record in records if logged else []:
            record["overall"]["length_ratio"] = 0.9
        history.write_text("".join(json.dumps(r) + "\n" for r in records))
        cells = pd.DataFrame([{"cell": "add1", "model": "additive", "seed": 1}])
        path = plot_learning_curves(out, cells, out / "curves.png")
        widths[logged] = matplotlib.image.imread(path).shape[1]
    assert widths[True] > 1.3 * widths[False]  # a third panel


def test_the_ratio_curve_draws_each_buckets_ratio_to_11_20_and_its_interval():
    from seq2seq_attn.ablation.length_study import plot_length_curve

    rows = [{"model": "additive", "metric": "bleu", "bucket": b, "lo": lo, "score": s, "ci_low": s - 1,
             "ci_high": s + 1, "ratio": r, "ratio_low": r - 0.1, "ratio_high": r + 0.1}
            for b, lo, s, r in (("1-10", 1, 20., 0.9), ("11-20", 11, 22., 1.0), ("31-40", 31, 11., 0.5))]  # fmt: skip
    fig = drawn_figure(lambda: plot_length_curve(pd.DataFrame(rows), "unused.png", caps={"additive": 30}, ratio=True))
    ax = fig.axes[0]
    curve = ax.lines[0]
    assert list(curve.get_ydata()) == [0.9, 1.0, 0.5] and "11-20-word BLEU" in ax.get_ylabel()
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.4) and band.max() == pytest.approx(1.1)


def test_the_ratio_axis_fits_the_buckets_from_11_20_on_when_a_short_one_would_stretch_it_and_names_it():
    from seq2seq_attn.ablation.length_study import plot_length_curve

    def rows(model, short):  # BLEU ratios per bucket; the 1-10 bucket's is ``short``
        return [{"model": model, "metric": "bleu", "bucket": b, "lo": lo, "score": 10.0, "ci_low": 9.0,
                 "ci_high": 11.0, "ratio": r, "ratio_low": r - 0.1, "ratio_high": r + 0.1}
                for b, lo, r in (("1-10", 1, short), ("11-20", 11, 1.0), ("31-40", 31, 0.8))]  # fmt: skip

    stats = pd.DataFrame(rows("add", 1.8) + rows("dot", 1.1) + rows("none", 2.9))
    panels = {"left": ["add"], "right": ["dot"]}
    fig = drawn_figure(lambda: plot_length_curve(stats, "unused.png", ratio=True, panels=panels))
    left, right = fig.axes[:2]
    assert left.get_ylim()[1] == pytest.approx(1.05 * 1.2) == right.get_ylim()[1]  # not stretched to 2.9
    notes = [[t.get_text() for t in ax.texts if "above the axis" in t.get_text()] for ax in (left, right)]
    assert notes == [["above the axis: 1-10 words: 1.8-2.9× (2 of 2 models)"],
                     ["above the axis: 1-10 words: 2.9× (1 of 2 models)"]]  # fmt: skip
    # no short bucket above the buckets' range: the axis is matplotlib's and no note is written
    calm = drawn_figure(lambda: plot_length_curve(pd.DataFrame(rows("dot", 1.1)), "unused.png", ratio=True))
    assert calm.axes[0].get_ylim()[1] > 1.2 and not [t for t in calm.axes[0].texts if "above" in t.get_text()]
    # a short bucket that would stretch the axis by less than a quarter is drawn whole, without a note
    near = drawn_figure(lambda: plot_length_curve(pd.DataFrame(rows("add", 1.4)), "unused.png", ratio=True))
    assert near.axes[0].get_ylim()[1] > 1.5 and not [t for t in near.axes[0].texts if "above" in t.get_text()]


def test_the_length_penalty_table_shows_the_protocols_and_the_tuned_search_side_by_side(tmp_path):
    from seq2seq_attn.ablation.length_study import length_penalty_table

    def scores(bleu: float, length: float) -> dict:
        rows = [{"bucket": b, "bleu": bleu - i, "length_ratio": length} for i, b in enumerate(["31-40", "41-50"])]
        return {"overall": {"bleu": bleu, "length_ratio": length}, "buckets": rows}

    folder = tmp_path / "cells" / "a"
    write_json(folder / "test_results.json", scores(20.0, 0.9))
    search = {
        "alpha": 1.0,
        "dev": [{"alpha": 0.6, "bleu": 21.04}, {"alpha": 1.0, "bleu": 21.5}],
        "test": scores(21.0, 1.0),
    }
    write_json(folder / "length_penalty.json", search)
    (tmp_path / "cells" / "b").mkdir()  # a cell that did not search: no row
    cells = pd.DataFrame([{"cell": "a", "model": "additive", "seed": 1}, {"cell": "b", "model": "none", "seed": 1}])
    rows = length_penalty_table(tmp_path, cells).splitlines()
    assert rows[0] == "| model | seed | dev BLEU per α | α chosen | test BLEU | 31-40 | 41-50 | length |"
    assert rows[2:] == [
        "| additive | 1 | 0.6: 21.0, 1: 21.5 | 1 | 20.0 → 21.0 | 20.0 → 21.0 | 19.0 → 20.0 | 0.90 → 1.00 |"
    ]


def test_panels_split_the_models_and_draw_the_reference_rows_in_each():
    from seq2seq_attn.ablation.length_study import panel_models

    models = ["bahdanau + additive, train_max_words=30", "luong + dot", "luong + general",
              "luong + general, heads=4", "transformer", "none (no attention), train_max_words=30"]  # fmt: skip
    panels = {"scorers": ["luong + dot", "luong + general"], "beyond": ["luong + general", "*heads=4", "transformer*"],
              "not run yet": ["transformer, positions=rotary"]}  # fmt: skip
    layout = dict(panel_models(models, panels))
    references = {models[0], models[-1]}
    assert set(layout) == {"scorers", "beyond"}  # a panel naming no finished model is left out
    assert set(layout["scorers"]) == {"luong + dot", "luong + general", *references}
    assert set(layout["beyond"]) == {"luong + general", "luong + general, heads=4", "transformer", *references}
    assert [m for m in layout["beyond"]] == [m for m in models if m in layout["beyond"]]  # the given order
    assert panel_models(models, None) == [("", models)]


def test_a_paneled_figure_shares_its_scale_and_lists_each_model_once():
    from seq2seq_attn.ablation.length_study import plot_length_curve

    rows = [{"model": m, "metric": "bleu", "bucket": b, "lo": lo, "score": s * k, "ci_low": s * k - 1,
             "ci_high": s * k + 1, "ratio": r, "ratio_low": r, "ratio_high": r}
            for k, m in enumerate(["additive", "dot", "transformer"], start=1)
            for b, lo, s, r in (("11-20", 11, 10., 1.0), ("31-40", 31, 5., 0.5))]  # fmt: skip
    panels = {"rnn": ["dot"], "tf": ["trans*"]}
    fig = drawn_figure(lambda: plot_length_curve(pd.DataFrame(rows), "unused.png", caps={"dot": 30}, panels=panels))
    left, right = fig.axes
    assert [ax.get_title() for ax in (left, right)] == ["rnn", "tf"]
    named = lambda ax: [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]  # noqa: E731
    assert named(left) == ["additive", "dot"] and named(right) == ["additive", "transformer"]
    assert left.get_ylim() == right.get_ylim()  # one scale: the panels compare
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["additive", "dot", "transformer"]
    assert [line.get_xdata()[0] for line in left.lines if line.get_linestyle() == ":"] == [30.5]  # dot's cap, left only
    assert not [line for line in right.lines if line.get_linestyle() == ":"]


def test_paneled_learning_curves_draw_a_row_per_panel_with_the_reference_rows_in_each(tmp_path):
    from seq2seq_attn.ablation.length_study import plot_learning_curves

    flows = {"add": ("bahdanau", "additive"), "dot": ("luong", "dot"), "none": ("none", "none")}
    cells = []
    for name, (flow, attention) in flows.items():
        for seed in (1, 2):
            overrides = {"model.flow": flow, "model.attention": attention, "seed_everything": seed}
            fake_cell(tmp_path, f"{name}{seed}", overrides, 0.8, seed)
            cells.append({"cell": f"{name}{seed}", "model": name, "seed": seed})
    panels = {"additive": ["add"], "dot": ["dot"], "not run yet": ["rotary"]}
    fig = drawn_figure(lambda: plot_learning_curves(tmp_path, pd.DataFrame(cells), tmp_path / "x.png", panels=panels))
    assert len(fig.axes) == 2 * 2  # two panels with a row each (dev BLEU, saturation); the empty panel left out
    top, bottom = fig.axes[0], fig.axes[2]
    assert [top.get_title(loc="left"), bottom.get_title(loc="left")] == ["additive", "dot"]
    named = lambda ax: [line.get_label() for line in ax.lines]  # noqa: E731
    assert named(top) == ["add (seed 1)", "add (seed 2)", "none (seed 1)", "none (seed 2)"]
    assert named(bottom) == ["dot (seed 1)", "dot (seed 2)", "none (seed 1)", "none (seed 2)"]
    assert list(top.lines[1].get_ydata()) == [1.0, 4.0, 3.0]  # seed 2's dev BLEU at updates 1, 2, 3
    assert top.get_ylim() == bottom.get_ylim() and fig.axes[1].get_ylim() == fig.axes[3].get_ylim()  # per column
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 6  # each cell once, below the figure
