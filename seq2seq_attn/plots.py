"""Small drawing helpers shared by the report, the notebooks and the loggers."""

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
