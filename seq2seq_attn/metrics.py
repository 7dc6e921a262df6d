"""Per-example evaluation records and their summary overall and per length bucket.

Records are dicts of 1-D tensors, one entry per example, so they can be
concatenated across batches (and gathered across ranks) before summing; every
corpus-level metric is a ratio of sums, never a mean of batch means.
"""

import math
from typing import Iterator, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

Records = dict[str, Tensor]

DEFAULT_BUCKETS = (10, 20, 30, 40, 50, 60)


class Metric(NamedTuple):
    """What every part of the package that logs, prints, plots or ranks a metric needs to know."""

    name: str
    title: str  # in tables and plot axes
    lower_is_better: bool = False
    progress_bar: bool = False  # shown in the progress bar during validation
    per_bucket: bool = False  # drawn against source length (test table, W&B, report plots)


# The one list of metrics, in the order tables show them.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("bleu", "BLEU", progress_bar=True, per_bucket=True),
        Metric("chrf", "chrF", per_bucket=True),
        Metric("exact_match", "exact match", progress_bar=True, per_bucket=True),
        Metric("token_acc", "token accuracy", per_bucket=True),
        Metric("loss", "loss", lower_is_better=True, progress_bar=True, per_bucket=True),
        Metric("ppl", "perplexity", lower_is_better=True),
        Metric("align_acc", "alignment accuracy", per_bucket=True),
        Metric("align_lag1_acc", "alignment accuracy, one step behind"),
        Metric("attn_entropy", "attention entropy", lower_is_better=True),
        # derived by the report: align_lag1_acc for Bahdanau's flow (it attends one step behind), else align_acc
        Metric("align_flow", "alignment accuracy, each flow against its own convention"),
    )
}
# the keys of a bucket row that are not metrics: its label, bounds (hi None when open) and size
BUCKET_KEYS = ("bucket", "lo", "hi", "count")


def metric_items(row: dict) -> Iterator[tuple[str, float]]:
    """The metric values of a summary or bucket row (its label, bounds and count left out)."""
    return ((k, v) for k, v in row.items() if k not in BUCKET_KEYS)


def title(name: str) -> str:
    """A metric's title, or its name for metrics outside :data:`METRICS`."""
    return METRICS[name].title if name in METRICS else name


def teacher_forced_records(
    logits: Tensor,
    trg_out: Tensor,
    src_lengths: Tensor,
    pad_id: int,
    weights: Optional[Tensor] = None,
    alignment: Optional[Tensor] = None,
) -> Records:
    """Loss, token accuracy and attention statistics per example.

    ``align_acc`` is the share of target steps whose most attended source position
    is the gold one; ``align_lag1_acc`` the share whose most attended position is
    the gold position of the previous target token (attention one step behind).

    Args:
        logits: ``(B, T, V)``; trg_out: ``(B, T)`` gold next tokens, PAD after EOS.
        src_lengths: ``(B,)``; weights: ``(B, T, S)`` teacher-forced attention or None.
        alignment: ``(B, T)`` gold source position per target step, -1 where none.
    """
    real = trg_out != pad_id  # (B, T)
    nll = F.cross_entropy(logits.transpose(1, 2), trg_out, ignore_index=pad_id, reduction="none")  # (B, T)
    correct = (logits.argmax(-1) == trg_out) & real  # (B, T)
    rec = {
        "src_len": src_lengths.float(),
        "nll": nll.sum(1),
        "tokens": real.sum(1).float(),
        "correct": correct.sum(1).float(),
    }
    if weights is not None:
        entropy = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (B, T)
        rec["entropy_sum"] = (entropy * real).sum(1)
        rec["entropy_steps"] = rec["tokens"]
        if alignment is not None:
            gold = alignment >= 0  # (B, T)
            focus = weights.argmax(-1)  # (B, T)
            rec["align_hits"] = ((focus == alignment) & gold).sum(1).float()
            rec["align_steps"] = gold.sum(1).float()
            # one step behind: the source of the previous output token (where Bahdanau's flow tends to look)
            previous = torch.cat([torch.full_like(alignment[:, :1], -1), alignment[:, :-1]], dim=1)  # (B, T)
            rec["lag_hits"] = ((focus == previous) & (previous >= 0)).sum(1).float()
            rec["lag_steps"] = (previous >= 0).sum(1).float()
    return rec


def exact_match(hyp: Sequence[Sequence[int]], ref: Sequence[Sequence[int]]) -> Tensor:
    """``(B,)`` 1.0 where the hypothesis equals the reference exactly."""
    return torch.tensor([float(list(h) == list(r)) for h, r in zip(hyp, ref)])


def concat_records(records: list[Records]) -> Records:
    """Join batches; keys missing from some batch (e.g. not decoded) are dropped."""
    keys = set.intersection(*(set(r) for r in records)) if records else set()
    return {k: torch.cat([r[k].detach().cpu() for r in records]) for k in sorted(keys)}


def summarize(rec: Records, mask: Optional[Tensor] = None) -> dict[str, float]:
    """Corpus-level metrics over the examples selected by ``mask`` ``(N,)``."""
    if mask is not None:
        rec = {k: v[mask] for k, v in rec.items()}
    n = int(rec["src_len"].numel())
    out: dict[str, float] = {"count": float(n)}
    if n == 0:
        return out

    def ratio(num: str, den: str) -> Optional[float]:
        if num not in rec or float(rec[den].sum()) == 0:
            return None
        return float(rec[num].sum() / rec[den].sum())

    loss = ratio("nll", "tokens")
    values = {
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)) if loss is not None else None,
        "token_acc": ratio("correct", "tokens"),
        "exact_match": float(rec["exact"].mean()) if "exact" in rec else None,
        "align_acc": ratio("align_hits", "align_steps"),
        "align_lag1_acc": ratio("lag_hits", "lag_steps"),
        "attn_entropy": ratio("entropy_sum", "entropy_steps"),
    }
    out.update({k: v for k, v in values.items() if v is not None})
    return out


class Bucket(NamedTuple):
    """A source-length bucket: ``lo`` to ``hi`` words or tokens inclusive, ``hi`` None when open."""

    label: str
    lo: int
    hi: Optional[int]


def buckets(edges: Sequence[int]) -> list[Bucket]:
    """``[10, 20]`` -> buckets ``1-10``, ``11-20``, ``21+`` (upper edges inclusive)."""
    lows = [1] + [e + 1 for e in edges]
    return [Bucket(f"{lo}-{hi}", lo, hi) for lo, hi in zip(lows, edges)] + [Bucket(f"{lows[-1]}+", lows[-1], None)]


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """``[10, 20]`` -> ``["1-10", "11-20", "21+"]``."""
    return [b.label for b in buckets(edges)]


def bucket_index(lengths: Tensor, edges: Sequence[int]) -> Tensor:
    """Bucket of each length. Args: lengths ``(N,)``. Returns ``(N,)`` long."""
    return torch.bucketize(lengths, torch.tensor(list(edges), dtype=lengths.dtype), right=False)


def summarize_buckets(rec: Records, edges: Sequence[int] = DEFAULT_BUCKETS) -> list[dict]:
    """One summary per non-empty source-length bucket, with its label and bounds (``lo``, ``hi``)."""
    index = bucket_index(rec["src_len"], edges)
    rows = []
    for i, bucket in enumerate(buckets(edges)):
        mask = index == i
        if bool(mask.any()):
            rows.append({"bucket": bucket.label, "lo": bucket.lo, "hi": bucket.hi, **summarize(rec, mask)})
    return rows


def format_table(rows: list[dict], columns: Sequence[str]) -> str:
    """A fixed-width text table of bucket summaries."""
    header = ["bucket", "count", *columns]
    lines = [" ".join(f"{h:>12}" for h in header)]
    for row in rows:
        cells = [str(row["bucket"]), str(int(row["count"]))]
        cells += [f"{row[c]:.4f}" if c in row else "-" for c in columns]
        lines.append(" ".join(f"{c:>12}" for c in cells))
    return "\n".join(lines)


def text_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacreBLEU defaults) of detokenised text."""
    from sacrebleu.metrics import BLEU, CHRF

    if not hyps:
        return {}
    return {
        "bleu": BLEU().corpus_score(list(hyps), [list(refs)]).score,
        "chrf": CHRF().corpus_score(list(hyps), [list(refs)]).score,
    }


def sacrebleu_signature() -> str:
    from sacrebleu.metrics import BLEU, CHRF

    signatures = []
    for name, metric in (("BLEU", BLEU()), ("chrF", CHRF())):
        metric.corpus_score(["x"], [["x"]])  # the signature (e.g. nrefs) is known after a first score
        signatures.append(f"{name} {metric.get_signature()}")
    return " | ".join(signatures)


def text_scores_by_bucket(
    hyps: Sequence[str], refs: Sequence[str], src_lengths: Sequence[int], edges: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Count, BLEU and chrF per non-empty source-length bucket (labels as :func:`bucket_labels`)."""
    index = bucket_index(torch.tensor(list(src_lengths), dtype=torch.float), edges).tolist()
    labels = bucket_labels(edges)
    out = {}
    for i, label in enumerate(labels):
        members = [j for j, b in enumerate(index) if b == i]
        if members:
            out[label] = {
                "count": float(len(members)),
                **text_scores([hyps[j] for j in members], [refs[j] for j in members]),
            }
    return out
