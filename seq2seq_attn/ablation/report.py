"""Results table, summary and plots of an ablation folder.

``results.csv`` has one row per cell x length bucket x metric; everything else
(``summary.md``, ``degradation.png``, ``attention.png``) is drawn from it (and
from the cells' saved attention maps), so ``seq2seq-attn report DIR`` can
redraw them at any time.
"""

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from seq2seq_attn.ablation.cell import RESULT
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.metrics import DEFAULT_METRIC, metric_info, metric_items, title
from seq2seq_attn.plots import BASELINE, bottleneck_last, curve_styles, draw_heatmap, is_baseline, legend_below
from seq2seq_attn.results import (
    TRANSLATIONS,
    VAL_HISTORY,
    DamagedFile,
    plain,
    read_json,
    read_jsonl,
    read_jsonl_gz,
    write_atomic,
    write_csv,
)

FIXED_COLUMNS = ["cell", "bucket", "lo", "hi", "extrapolation", "train_max_length", "metric", "value", "count"]


def _column(key: str) -> str:
    """``model.attention`` -> ``attention``; ``model.cell`` -> ``rnn_cell`` (``cell`` names the grid cell)."""
    name = key.split(".")[-1]
    return "rnn_cell" if name == "cell" else name


def cell_rows(folder: Path) -> list[dict]:
    """Rows of one finished cell: its overrides as columns, one row per bucket x metric."""
    overrides = json.loads((folder / "cell.json").read_text())["overrides"]
    config = {_column(k): v for k, v in overrides.items()}
    result = json.loads((folder / "result.json").read_text())
    train_max = result.get("meta", {}).get("train_max_length")
    rows = []
    for bucket in [{"bucket": "all", **result["overall"]}, *result["buckets"]]:
        lo, hi = bucket.get("lo"), bucket.get("hi")
        extrapolation = bool(train_max is not None and lo is not None and lo > train_max)
        for metric, value in metric_items(bucket):
            rows.append(
                {
                    "cell": folder.name,
                    **config,
                    "bucket": bucket["bucket"],
                    "lo": lo,
                    "hi": hi,
                    "extrapolation": extrapolation,
                    "train_max_length": train_max,
                    "metric": metric,
                    "value": value,
                    "count": int(bucket["count"]),
                }
            )
    return rows


def collect_runs(root: Path, out: Path) -> int:
    """Lay out the tested runs under ``root`` like an ablation's cells in ``out``; returns how many.

    Every folder with a ``test_results.json`` (what ``seq2seq-attn test`` writes beside a
    checkpoint's run) becomes a cell keyed by attention, flow, input feeding, cell and seed,
    so ``write_report`` draws the same table and plots as for a grid: the local stand-in for
    the W&B dashboard.
    """
    import shutil

    import yaml

    count = 0
    for results in sorted(Path(root).rglob("test_results.json")):
        run = results.parent
        if Path(out).resolve() in run.resolve().parents or run.parent.name == "cells":
            continue  # a report folder's own copies, or an ablation's cells (report those with `report DIR`)
        meta = json.loads(results.read_text()).get("meta", {})
        config = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
        overrides = {f"model.{key}": meta.get(key) for key in ("attention", "flow", "cell")}
        if meta.get("flow") == "luong":
            overrides["model.input_feed"] = meta.get("input_feed")
        overrides["seed_everything"] = (config or {}).get("seed_everything")
        name = run.relative_to(root).as_posix().replace("/", "__") or run.name
        folder = Path(out) / "cells" / name
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "cell.json", json.dumps({"name": name, "overrides": overrides, "run": str(run)}))
        shutil.copyfile(results, folder / "result.json")
        if (run / "test_attention.json").is_file():
            shutil.copyfile(run / "test_attention.json", folder / "test_attention.json")
        count += 1
    return count


def finished_cells(out: Path, warn: bool = False) -> list[tuple[Path, dict]]:
    """Each finished cell of ``out`` whose files all read back, with its ``result.json``. The others are left
    out (with ``warn``, each with a one-line warning that names its damaged file), so that one bad copy does
    not cost the report of the rest."""
    cells = []
    for folder in sorted(p.parent for p in (out / "cells").glob(f"*/{RESULT}")):
        try:
            result = read_json(folder / RESULT)
            for name, read in (("cell.json", read_json), (VAL_HISTORY, read_jsonl), (TRANSLATIONS, read_jsonl_gz)):
                if (folder / name).is_file():
                    read(folder / name)
        except DamagedFile as err:
            if warn:
                print(f"warning: leaving cell {folder.name} out of the report: {err}", file=sys.stderr)
            continue
        cells.append((folder, result))
    return cells


def write_results_csv(out: Path) -> Optional[Path]:
    rows = [row for folder, _ in finished_cells(out, warn=True) for row in cell_rows(folder)]
    if not rows:
        return None
    config_cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in FIXED_COLUMNS]
    return write_csv(out / "results.csv", rows, ["cell", *config_cols, *FIXED_COLUMNS[1:]])


def config_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in FIXED_COLUMNS]


def seed_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in config_columns(df) if "seed" in c]


def model_label(row: pd.Series, columns: list[str], shared: frozenset[str] = frozenset()) -> str:
    """``luong + general (no feed)``; the baseline is ``none (no attention)``; ``transformer``.

    ``shared``: settings every Transformer cell of the report has alike (its size, its schedule), which
    name the architecture rather than tell its cells apart, and stay out of the Transformer's label; a
    grid axis the other cells vary along (a training-length cap) is not one of them.
    """
    # a key another cell's sub-grid sets is blank here
    values = {c: plain(v) for c in columns if pd.notna(v := row[c])}
    if values.get("arch") == "transformer":
        rnn_only = ("arch", "flow", "attention", "input_feed")
        others = [f"{c}={v}" for c, v in values.items() if c not in rnn_only and c not in shared]
        return ", ".join(["transformer", *others])
    if values.get("attention") == "none" or values.get("flow") == "none":
        label = f"{BASELINE} (no attention)"
    else:
        label = " + ".join(str(values[c]) for c in ("flow", "attention") if c in values)
    if str(values.get("input_feed")).lower() == "false":
        label += " (no feed)"
    others = [f"{c}={v}" for c, v in values.items() if c not in ("flow", "attention", "input_feed", "arch")]
    return ", ".join([label, *others]) if label else ", ".join(others)


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    model_cols = [c for c in config_columns(df) if c not in seed_columns(df)]
    df = df.copy()
    arch = df["arch"].astype(str) if "arch" in df.columns else pd.Series("rnn", index=df.index)
    is_transformer = arch == "transformer"
    transformer, others = df[is_transformer], df[~is_transformer]
    shared = frozenset(
        c
        for c in model_cols
        if transformer[c].notna().all() and transformer[c].nunique() == 1 and others[c].nunique() <= 1
    )
    df["model"] = df.apply(lambda r: model_label(r, model_cols, shared), axis=1) if model_cols else "model"
    df["baseline"] = df["model"].map(is_baseline)
    return df


def with_own_alignment(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``align_flow``: each flow's alignment accuracy against its own convention. Bahdanau's flow
    queries with s(t-1), before it has read y(t-1), and attends one step behind (``align_lag1_acc``);
    Luong's attends with s(t) (``align_acc``). Plotting both against one convention reads as a failure."""
    if "flow" not in df.columns:
        return df
    bahdanau = df.flow.astype(str) == "bahdanau"
    own = df[(df.metric == "align_lag1_acc") & bahdanau | (df.metric == "align_acc") & ~bahdanau].copy()
    own["metric"] = "align_flow"
    return pd.concat([df, own], ignore_index=True)


def bucket_order(df: pd.DataFrame) -> list[str]:
    buckets = df[df.bucket != "all"][["bucket", "lo"]].drop_duplicates().sort_values("lo")
    return ["all", *buckets.bucket.tolist()]


def extrapolation_marks(df: pd.DataFrame) -> tuple[dict[str, set[str]], set[str]]:
    """Per model, the buckets longer than any of its training sentences; and the buckets beyond every model's."""
    flagged = df[(df.extrapolation.astype(str).str.lower() == "true") & (df.bucket != "all")]
    beyond = {model: set(rows.bucket) for model, rows in flagged.groupby("model")}
    each = [beyond.get(model, set()) for model in df.model.unique()]
    return beyond, set.intersection(*each) if each else set()


def summary_table(df: pd.DataFrame, metric: str) -> str:
    """Markdown: mean ± std over seeds per model and bucket; the best per bucket in bold."""
    part = df[df.metric == metric]
    if part.empty:
        return ""
    stats = part.groupby(["model", "bucket"])["value"].agg(["mean", "std", "count"]).reset_index()
    order = bucket_order(part)
    beyond, shared = extrapolation_marks(part)  # a shared one is marked in the header
    info = metric_info(metric)
    lower_is_better = bool(info and info.lower_is_better)
    best = stats.groupby("bucket")["mean"].min() if lower_is_better else stats.groupby("bucket")["mean"].max()
    header = ["model", *[f"{b} †" if b in shared else b for b in order]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model in sorted(stats.model.unique(), key=bottleneck_last):
        cells = []
        for bucket in order:
            row = stats[(stats.model == model) & (stats.bucket == bucket)]
            if row.empty:
                cells.append("-")
                continue
            mean, std = float(row["mean"].iloc[0]), row["std"].iloc[0]
            text = f"{mean:.3f}" + (f" ± {std:.3f}" if pd.notna(std) else "")
            mark = " †" if bucket in beyond.get(model, ()) and bucket not in shared else ""  # a model's own cap
            cells.append((f"**{text}**" if abs(mean - best[bucket]) < 1e-9 else text) + mark)
        lines.append("| " + " | ".join([model, *cells]) + " |")
    return "\n".join(lines)


def failures(out: Path) -> list[str]:
    lines = []
    for error in sorted((out / "cells").glob("*/error.json")):
        if not (error.parent / "result.json").exists():
            lines.append(f"- `{error.parent.name}`: {json.loads(error.read_text())['error']}")
    return lines


def short_cells(out: Path, key: str = "stopped_short") -> list[str]:
    """Finished cells that are not the run the grid asked for: ``stopped_short`` of their updates (a time cap),
    or, with early stopping, ``hit_cap`` before dev stopped improving."""
    lines = []
    for folder, result in finished_cells(out):
        if result.get(key):
            lines.append(f"- `{folder.name}`: {result[key]}; delete its result.json and run again with a higher cap")
    return lines


def convergence_table(out: Path) -> str:
    """Markdown: per cell, what stopped it, after how many updates and how long, its best update, the minutes
    its test took, its precision and the CPU it trained on (cells of one grid may run on different machines),
    then the grid's total machine time."""
    rows, train_total, test_total = [], 0.0, 0.0
    for folder, result in finished_cells(out):
        if result.get("stopped_by") is None:
            continue  # a cell from before these fields were recorded
        train = result.get("train_seconds", result["fit_seconds"])  # train_seconds sums every resumed fit
        test = result.get("test_seconds")  # with the length-penalty search, if any
        train_total, test_total = train_total + train, test_total + (test or 0.0)
        best = result.get("best_step")
        cells = [f"`{folder.name}`", result["stopped_by"], f"{result['steps']:,}",
                 "-" if best is None else f"{best:,}", f"{train / 60:.0f}",
                 "-" if test is None else f"{test / 60:.0f}", result.get("precision", "-"),
                 cpu_of(folder / "environment.json")]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return ""
    header = "| cell | stopped by | updates | best on dev at | training minutes | test minutes | precision | CPU |"
    total = (
        f"Total: {len(rows)} cell{'s' * (len(rows) > 1)}, {duration(train_total)} of training and "
        f"{duration(test_total)} of testing, each cell one process on its machine's cores (wall-clock time, "
        "validation included)."
    )
    return "\n".join([header, "|---|---|---|---|---|---|---|---|", *rows, "", total])


def duration(seconds: float) -> str:
    """'3.0 hours' from an hour up, else '12 minutes'."""
    return f"{seconds / 3600:.1f} hours" if seconds >= 3600 else f"{seconds / 60:.0f} minutes"


BF16_FLAGS = {"avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX", "bf16": "BF16 (Arm)"}  # what makes bf16 pay on a CPU


def cpu_of(environment: Path) -> str:
    """A cell's CPU from its ``environment.json``, with the bf16 instructions it has; '-' without the file."""
    if not environment.is_file():
        return "-"
    cpu = json.loads(environment.read_text()).get("cpu") or {}
    flags = [name for flag, name in BF16_FLAGS.items() if flag in cpu.get("flags", [])]
    return f"{cpu.get('model', '-')}, " + (" and ".join(flags) if flags else "no bf16 instructions")


def kept_grid(out: Path) -> dict:
    """The grid file the runner keeps in its output folder (``grid.yaml``); ``{}`` without one."""
    grid = out / "grid.yaml"
    if not grid.is_file():
        return {}
    import yaml

    return yaml.safe_load(grid.read_text()) or {}


def ablation_name(out: Path) -> str:
    """The grid's name, from the copy the runner keeps; else the folder name."""
    return kept_grid(out).get("name", out.name)


def grid_metric(out: Path) -> str:
    """The metric the grid names for its main table and plot (``metric:``); else :data:`DEFAULT_METRIC`."""
    return kept_grid(out).get("metric", DEFAULT_METRIC)


def seeds_per_model(df: pd.DataFrame) -> str:
    """``2 seeds``, or ``1 to 2 seeds`` while some models have fewer seeds than others."""
    columns = seed_columns(df)
    counts = df[["model", *columns]].drop_duplicates().groupby("model").size() if columns else pd.Series([1])
    low, high = int(counts.min()), int(counts.max())
    return f"{low} to {high} seeds" if low != high else f"{low} seed" + ("s" if low > 1 else "")


def write_summary(out: Path, df: pd.DataFrame, metric: str, extra: str = "") -> Path:
    parts = [
        f"# Ablation: {ablation_name(out)}",
        "",
        f"Mean ± std over {seeds_per_model(df)} per model, overall and per source-length bucket; the best per bucket"
        " is in bold; † marks buckets longer than any training sentence of the model (extrapolation; in the header"
        " when every model's).",
    ]
    df = with_own_alignment(df)
    per_head = sorted(m for m in df.metric.unique() if re.fullmatch(r"(attn_saturated|score_range)_h\d+", m))
    saturation = ["attn_saturated", "score_range", *per_head]  # attention that has stopped learning, if any
    names = [metric, "align_flow", "align_acc", "align_lag1_acc", "attn_entropy", *saturation, "token_acc"]
    for name in dict.fromkeys(names):
        table = summary_table(df, name)
        if table:
            parts += ["", f"## {title(name)}", "", table]
    parts += [extra] if extra else []
    convergence = convergence_table(out)
    if convergence:
        parts += ["", "## Training: what stopped each cell", "", convergence]
    short = short_cells(out)
    if short:
        parts += ["", "## Cells that stopped short of their budget", "", *short]
    capped = short_cells(out, "hit_cap")
    if capped:
        parts += ["", "## Cells that hit the cap before dev stopped improving", "", *capped]
    failed = failures(out)
    if failed:
        parts += ["", "## Failed cells", "", *failed]
    return write_atomic(out / "summary.md", "\n".join(parts) + "\n")


def plot_degradation(df: pd.DataFrame, metric: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = degradation_figure(df, metric, f"{ablation_name(path.parent)}: quality vs source length")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def degradation_figure(df: pd.DataFrame, metric: str, heading: str):
    """``metric`` and, where the cells have it, alignment accuracy per source bucket: a curve per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = with_own_alignment(df)
    metrics = [m for m in dict.fromkeys([metric, "align_flow"]) if (df.metric == m).any()]
    order = bucket_order(df)[1:]
    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 4.8), squeeze=False)
    beyond, shared = extrapolation_marks(df)
    styles = curve_styles(sorted(df.model.unique()))
    for ax, name in zip(axes[0], metrics):
        part = df[(df.metric == name) & (df.bucket != "all")]
        stats = part.groupby(["model", "bucket"])["value"].agg(["mean", "std"]).reset_index()
        for model in sorted(stats.model.unique(), key=bottleneck_last):
            rows = stats[stats.model == model].set_index("bucket").reindex(order).dropna(subset=["mean"])
            x = np.array([order.index(b) for b in rows.index])
            line = ax.plot(x, rows["mean"], marker="o", ms=3, label=model, **styles[model])[0]
            std = rows["std"].fillna(0.0)
            ax.fill_between(x, rows["mean"] - std, rows["mean"] + std, alpha=0.15, color=line.get_color())
            own = rows.index.isin(list(beyond.get(model, ())))
            if own.any():  # beyond this model's longest training sentence: open markers
                ax.plot(x[own], rows["mean"][own], "o", ms=6, mfc="white", color=line.get_color())
        if shared:
            first = min(order.index(b) for b in shared)
            ax.axvspan(first - 0.5, len(order) - 0.5, color="grey", alpha=0.12, label="beyond training lengths")
        ax.set_xticks(range(len(order)), order, rotation=45)
        ax.set_xlabel("source length (tokens; open markers: beyond the model's training lengths)")
        ax.set_ylabel(textwrap.fill(title(name), 36))  # a long name on two lines, not into the heading
        ax.grid(alpha=0.3)
    fig.suptitle(heading)
    fig.tight_layout()
    legend_below(fig, axes[0][0], fontsize=7)
    return fig


def plot_attention(out: Path, df: pd.DataFrame, path: Path, examples: int = 3) -> Optional[Path]:
    """Heatmaps of the same test examples for each model (first seed), side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = df.drop_duplicates("model").sort_values("model", key=lambda s: s.map(is_baseline), kind="stable")
    maps = {}
    for _, row in cells.iterrows():
        file = out / "cells" / row["cell"] / "test_attention.json"
        if file.is_file():
            maps[row["model"]] = json.loads(file.read_text())[:examples]
    if not maps:
        return None
    n_ex = max(len(m) for m in maps.values())
    fig, axes = plt.subplots(n_ex, len(maps), figsize=(2.6 * len(maps), 2.6 * n_ex), squeeze=False)
    for col, (model, items) in enumerate(maps.items()):
        for row in range(n_ex):
            item = items[row] if row < len(items) else {"weights": None, "src": [], "hyp": []}
            title = model if row == 0 else ""
            draw_heatmap(axes[row][col], item["weights"], item["src"], item["hyp"], title, labels=False)
    fig.suptitle("attention on the same test examples (rows) per model (columns)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(out: Path, metric: Optional[str] = None) -> list[Path]:
    """summary.md, degradation.png and attention.png from results.csv; ``metric`` (by default the grid's own,
    :func:`grid_metric`) leads the summary and is the degradation plot's."""
    out = Path(out)
    asked, metric = metric, metric or grid_metric(out)
    csv_path = out / "results.csv"
    if not csv_path.is_file():
        print(f"no results yet in {out}: nothing to report")
        return []
    df = with_labels(pd.read_csv(csv_path))
    if not (df.metric == metric).any():
        if asked:  # a name the user typed: say so rather than draw another metric under it
            have = ", ".join(sorted(df.metric.unique()))
            raise ConfigError(f"metric {asked!r} is not in {csv_path}; pass one of: {have}")
        metric = DEFAULT_METRIC if (df.metric == DEFAULT_METRIC).any() else df.metric.iloc[0]
    from seq2seq_attn.ablation.grid import check_compare, check_panels
    from seq2seq_attn.ablation.length_study import write_length_study

    kept = kept_grid(out)
    panels, compare = (
        check_panels(kept.get("panels"), out / "grid.yaml"),
        check_compare(kept.get("compare"), out / "grid.yaml"),
    )
    # real text with saved translations: intervals, tests
    study, extra = write_length_study(out, df, panels=panels, compare=compare)
    written = [write_summary(out, df, metric, extra), plot_degradation(df, metric, out / "degradation.png"), *study]
    heatmaps = plot_attention(out, df, out / "attention.png")
    written += [heatmaps] if heatmaps else []
    print((out / "summary.md").read_text())
    print("wrote " + ", ".join(str(p) for p in written))
    return written
