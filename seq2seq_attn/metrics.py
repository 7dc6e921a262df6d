"""Per-example evaluation records and their summary overall and per length bucket.

Records are dicts of 1-D tensors, one entry per example, so they can be
concatenated across batches (and gathered across ranks) before summing; every
corpus-level metric is a ratio of sums, never a mean of batch means.
"""

import math
import re
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

Records = dict[str, Tensor]

DEFAULT_METRIC = "exact_match"  # the toy tasks' main metric; a grid's `metric:` names another
DEFAULT_BUCKETS = (10, 20, 30, 40, 50, 60)


# an attention row whose largest weight is above this passes almost no gradient to its other positions
SATURATED = 0.99


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
        # below 1 the output is shorter than the reference (BLEU's brevity penalty); real text only
        Metric("length_ratio", "output length / reference length", per_bucket=True),
        Metric("loss", "loss", lower_is_better=True, progress_bar=True, per_bucket=True),
        Metric("ppl", "perplexity", lower_is_better=True),
        Metric("align_acc", "alignment accuracy", per_bucket=True),
        Metric("align_lag1_acc", "alignment accuracy, one step behind"),
        Metric("attn_entropy", "attention entropy", lower_is_better=True),
        # saturation (attention_saturation): per head too, as attn_saturated_h1, score_range_h1, ...
        Metric("attn_saturated", f"attention rows with a weight above {SATURATED}", lower_is_better=True),
        Metric("score_range", "median attention score range (nats)", lower_is_better=True),
        # derived by the report: align_lag1_acc for Bahdanau's flow (it attends one step behind), else align_acc
        Metric("align_flow", "alignment accuracy, each flow against its own convention"),
    )
}
# the keys of a bucket row that are not metrics: its label, bounds (hi None when open) and size
BUCKET_KEYS = ("bucket", "lo", "hi", "count")


def metric_items(row: dict) -> Iterator[tuple[str, float]]:
    """The metric values of a summary or bucket row (its label, bounds and count left out)."""
    return ((k, v) for k, v in row.items() if k not in BUCKET_KEYS)


def metric_info(name: str) -> Optional[Metric]:
    """The :data:`METRICS` entry of ``name``; a per-head name (``attn_saturated_h2``) gets its metric's, with
    the head in the title; None for a name outside the table."""
    base, head = re.fullmatch(r"(.+?)(?:_h(\d+))?", name).groups()
    if name in METRICS or base not in METRICS:
        return METRICS.get(name)
    return METRICS[base]._replace(name=name, title=f"{METRICS[base].title}, head {head}")


def title(name: str) -> str:
    """A metric's title, or its name for metrics outside :data:`METRICS`."""
    info = metric_info(name)
    return info.title if info else name


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

    Loss and accuracy are computed in fp32 over the N real positions, row-major (``(N, V)`` contiguous):
    ``F.cross_entropy`` over the class dimension of a transposed ``(B, V, T)`` view and ``argmax`` over
    bf16 logits run 3-4x slower on CPU, and the padding needs neither.

    Args:
        logits: ``(B, T, V)``, or ``(N, V)`` for the real positions only (``trg_out != pad_id``, row-major:
            what the model gives for ``select=real``); trg_out: ``(B, T)`` gold next tokens, PAD after EOS.
        src_lengths: ``(B,)``; weights: ``(B, T, S)`` teacher-forced attention or None.
        alignment: ``(B, T)`` gold source position per target step, -1 where none.
    """
    real = trg_out != pad_id  # (B, T)
    rows = (logits[real] if logits.dim() == 3 else logits).float()  # (N, V)
    target = trg_out[real]  # (N,)
    nll = torch.zeros(real.shape, device=rows.device).masked_scatter_(
        real, F.cross_entropy(rows, target, reduction="none")
    )  # (B, T), 0 on padding
    correct = torch.zeros_like(real).masked_scatter_(real, rows.argmax(-1) == target)  # (B, T)
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


def attention_saturation(energies: Tensor, real: Tensor) -> tuple[Records, list[Tensor]]:
    """How hard the attention is, per example: the rows whose largest weight is above :data:`SATURATED`,
    and each row's score range (largest minus smallest energy over the positions it may look at).

    A row is counted when it is a real target step with at least two positions to choose from (a
    one-word source is one-hot by necessity). Multi-head models are counted per head as well
    (``sat_rows_h1``, ...), since the mean over heads of one-hot heads is not one-hot.

    Args: energies ``(B, h, T, S)``, ``-inf`` where a head may not look; real ``(B, T)`` bool.
    Returns: records ``sat_rows`` and ``sat_steps`` ``(B,)`` (over all heads; per head with ``_h<i>``), and
    per example its counted rows' score ranges ``(n, h)``.
    """
    energies = energies.detach().float()  # (B, h, T, S)
    allowed = torch.isfinite(energies)  # (B, h, T, S)
    counted = (allowed.sum(-1) >= 2) & real.unsqueeze(1)  # (B, h, T)
    top = energies.amax(-1)  # (B, h, T)
    saturated = (torch.exp(top - energies.logsumexp(-1)) > SATURATED) & counted  # (B, h, T) largest weight
    spread = top - energies.masked_fill(~allowed, float("inf")).amin(-1)  # (B, h, T)
    rec = {"sat_rows": saturated.sum((1, 2)).float(), "sat_steps": counted.sum((1, 2)).float()}
    if energies.size(1) > 1:
        for head in range(energies.size(1)):
            rec[f"sat_rows_h{head + 1}"] = saturated[:, head].sum(-1).float()
            rec[f"sat_steps_h{head + 1}"] = counted[:, head].sum(-1).float()
    # the heads share their positions: a row is counted for all heads or none
    ranges = [row[:, keep].t() for row, keep in zip(spread, counted[:, 0])]  # (n, h) each
    return rec, ranges


def range_medians(ranges: Sequence[Tensor]) -> dict[str, float]:
    """``score_range``: the median over all counted rows and heads; ``score_range_h<i>`` per head.

    Args: ranges ``(n, h)`` per example, as :func:`attention_saturation` returns them."""
    joined = torch.cat(list(ranges)) if ranges else torch.zeros(0, 1)  # (N, h)
    if joined.numel() == 0:
        return {}
    out = {"score_range": _median(joined.flatten())}
    if joined.size(1) > 1:
        out.update({f"score_range_h{head + 1}": _median(joined[:, head]) for head in range(joined.size(1))})
    return out


def _median(values: Tensor) -> float:
    """The median of ``values`` ``(N,)``, the mean of the two middle ones when N is even (not torch's lower one)."""
    ordered = values.double().sort().values  # (N,)
    middle = (len(ordered) - 1) / 2
    return float((ordered[math.floor(middle)] + ordered[math.ceil(middle)]) / 2)


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
    for key in rec:  # the share of saturated attention rows, over all heads and per head
        if key.startswith("sat_rows"):
            suffix = key[len("sat_rows") :]
            values[f"attn_saturated{suffix}"] = ratio(key, f"sat_steps{suffix}")
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


def text_scores(hyps: Sequence[str], refs: Sequence[str], length_ratio: bool = False) -> dict[str, float]:
    """Corpus BLEU and chrF (sacreBLEU defaults) of detokenised text; with ``length_ratio``, also the output's
    length over the reference's in BLEU's tokens (below 1, BLEU's brevity penalty lowers its score)."""
    return _corpus_scorer(hyps, refs, length_ratio)(slice(None)) if hyps else {}


def _corpus_scorer(hyps: Sequence[str], refs: Sequence[str], length_ratio: bool) -> Callable[[Any], dict[str, float]]:
    """:func:`text_scores` of any subset of the sentences (a numpy index into them), from sacreBLEU's sentence
    statistics (n-gram and character n-gram counts) extracted once: a corpus score is a function of their sums,
    so each equals ``corpus_score`` on the subset's sentences."""
    from seq2seq_attn.stats import sentence_statistics, statistics_of, text_scorer

    stats = {metric: sentence_statistics(metric, hyps, refs) for metric in ("bleu", "chrf")}  # (N, K) each
    names = ("bleu", "chrf", "length_ratio") if length_ratio else ("bleu", "chrf")
    scorers = {name: (statistics_of(name), text_scorer(name)) for name in names}

    def scores(rows: Any) -> dict[str, float]:
        sums = {metric: s[rows].sum(0) for metric, s in stats.items()}  # (K,) each
        return {name: score(sums[metric]) for name, (metric, score) in scorers.items()}

    return scores


def sacrebleu_signature() -> str:
    from sacrebleu.metrics import BLEU, CHRF

    signatures = []
    for name, metric in (("BLEU", BLEU()), ("chrF", CHRF())):
        metric.corpus_score(["x"], [["x"]])  # the signature (e.g. nrefs) is known after a first score
        signatures.append(f"{name} {metric.get_signature()}")
    return " | ".join(signatures)


def text_score_table(
    hyps: Sequence[str], refs: Sequence[str], src_lengths: Sequence[int], edges: Sequence[int],
    length_ratio: bool = False,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:  # fmt: skip
    """:func:`text_scores` of the whole corpus, and the count and scores of each non-empty source-length bucket
    (labels as :func:`bucket_labels`). The text is read once, not once per bucket (half of a validation's
    scoring time on the Bible dev split)."""
    if not hyps:
        return {}, {}
    scores = _corpus_scorer(hyps, refs, length_ratio)
    index = bucket_index(torch.tensor(list(src_lengths), dtype=torch.float), edges).numpy()  # (N,)
    by_bucket = {}
    for i, label in enumerate(bucket_labels(edges)):
        members = index == i  # (N,)
        if members.any():
            by_bucket[label] = {"count": float(members.sum()), **scores(members)}
    return scores(slice(None)), by_bucket
