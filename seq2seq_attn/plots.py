"""Small drawing helpers shared by the report, the notebooks and the loggers."""

import itertools
from typing import Optional, Sequence


def draw_heatmap(
    ax,
    weights: Optional[Sequence[Sequence[float]]],
    src_tokens: Sequence[str],
    out_tokens: Sequence[str],
    title: str = "",
    labels: bool = True,
) -> None:
    """Attention weights ``(len(out), len(src))`` on a matplotlib axis; rows are outputs."""
    ax.set_title(title, fontsize=8)
    if weights is None or len(weights) == 0:
        ax.text(0.5, 0.5, "no attention" if weights is None else "empty output", ha="center", va="center", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
    if labels and len(src_tokens) <= 40:
        ax.set_xticks(range(len(src_tokens)), list(src_tokens), fontsize=6, rotation=90)
        ax.set_yticks(range(len(out_tokens)), list(out_tokens), fontsize=6)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"source ({len(src_tokens)})", fontsize=7)
        ax.set_ylabel(f"output ({len(out_tokens)})", fontsize=7)


BASELINE = "none"  # the no-attention bottleneck's labels start with it (report.model_label)


def is_baseline(model: str) -> bool:
    """Whether a model label names the no-attention bottleneck."""
    return model.startswith(BASELINE)


def bottleneck_last(key: str | tuple) -> tuple:
    """Sort key for model labels, or tuples that start with one: the attention models in order, then the
    bottleneck (the order of the tables and legends)."""
    return (is_baseline(key[0] if isinstance(key, tuple) else key), key)


def bottleneck_first(key: str | tuple) -> tuple:
    """Sort key: the bottleneck first (the reference a figure draws before the models it is compared with)."""
    return (not is_baseline(key[0] if isinstance(key, tuple) else key), key)


CAP_KEY = "train_max_words="  # how a model label names its training cap (a grid key of the -30/-50 protocol)
CAP_STYLES = ["-", "--", ":", "-."]  # the longest cap solid, shorter ones dashed, then dotted


def family(model: str) -> str:
    """A model label without its training cap: the models a -30/-50 grid trains twice share it."""
    return ", ".join(part for part in model.split(", ") if not part.startswith(CAP_KEY))


def label_cap(model: str) -> float:
    """The training cap a model label names (infinite when it names none: trained on every length)."""
    caps = [int(part[len(CAP_KEY) :]) for part in model.split(", ") if part.startswith(CAP_KEY)]
    return max(caps) if caps else float("inf")


def curve_styles(models: Sequence[str]) -> dict[str, dict]:
    """Colour per model family (the bottleneck black), line style per training cap within the family (as in
    Bahdanau et al.'s Fig. 2: -50 solid, -30 dashed); a lone bottleneck stays dashed, as the baseline. Compute
    them once from every model of a report, so that a model looks the same in each of its figures."""
    import matplotlib.pyplot as plt

    families = sorted({family(m) for m in models}, key=bottleneck_first)
    palette = itertools.cycle(plt.get_cmap("tab10").colors)
    styles = {}
    for k, name in enumerate(families):
        colour = "black" if k == 0 and is_baseline(name) else next(palette)
        members = sorted((m for m in models if family(m) == name), key=label_cap, reverse=True)
        for rank, model in enumerate(members):
            lone_baseline = len(members) == 1 and colour == "black"
            styles[model] = {"color": colour, "ls": "--" if lone_baseline else CAP_STYLES[rank % len(CAP_STYLES)]}
    return styles


def legend_below(fig, ax, ncol: int = 2, fontsize: int = 8) -> None:
    """The legend of ``ax`` (an axis, or several: each label once) under the whole figure, where it hides no
    curve; after ``tight_layout``, and saved with ``bbox_inches="tight"`` so that the picture grows to hold it."""
    entries = {}  # label -> handle, in the order the axes draw them
    for one in ax if isinstance(ax, Sequence) else [ax]:
        for handle, label in zip(*one.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    below = {"loc": "upper center", "bbox_to_anchor": (0.5, 0.0), "frameon": False}
    fig.legend(list(entries.values()), list(entries), ncol=ncol, fontsize=fontsize, **below)
