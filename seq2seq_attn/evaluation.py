"""One validation or test pass: per-example records, hypotheses, attention maps, summaries.

Plain PyTorch and Python (no Lightning): :class:`Seq2SeqLitModule` feeds it one
batch at a time and asks for the summary at the end of the epoch.
"""

from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from seq2seq_attn.data.collate import Batch
from seq2seq_attn.data.datamodule import TextSource
from seq2seq_attn.data.vocab import PAD_ID, Vocab
from seq2seq_attn.metrics import (
    Records,
    attention_saturation,
    concat_records,
    exact_match,
    range_medians,
    summarize,
    summarize_buckets,
    teacher_forced_records,
    text_score_table,
)
from seq2seq_attn.search import Hypotheses


def all_gather(obj: Any) -> list:
    """``obj`` of every DDP process, in rank order; ``[obj]`` without DDP."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return [obj]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def score_translations(rows: list[dict], edges: Sequence[int]) -> tuple[dict, dict]:
    """BLEU, chrF and the output's length over the reference's, overall and per source-length bucket, of
    :meth:`Evaluation.translations` rows (the length ratio shows a model that stops early, at every validation)."""
    hyps, refs, lengths = [r["hyp"] for r in rows], [r["ref"] for r in rows], [r["src_len"] for r in rows]
    return text_score_table(hyps, refs, lengths, edges, length_ratio=True)


class Evaluation:
    """Accumulates one pass over a split.

    Args:
        trg_vocab, src_vocab: to turn ids into tokens (hypotheses, attention maps).
        split: ``val`` or ``test``, the name ``text`` knows the split by.
        text: the data module when it holds real text: then buckets count source
            words and BLEU/chrF are computed against its raw references.
        attention_examples: keep the attention maps of dataset examples ``0..N-1``.
    """

    def __init__(
        self,
        trg_vocab: Optional[Vocab],
        src_vocab: Optional[Vocab] = None,
        split: str = "test",
        text: Optional[TextSource] = None,
        attention_examples: int = 0,
    ) -> None:
        self.trg_vocab, self.src_vocab = trg_vocab, src_vocab
        self.split, self.text, self.attention_examples = split, text, attention_examples
        self.records: list[Records] = []
        self.hyps: list[tuple[int, list[int]]] = []
        self.attention_maps: list[dict] = []
        self.score_ranges: dict[int, Tensor] = {}  # example index -> its attention rows' score ranges (n, h)
        self.decoded = 0

    def add(
        self,
        batch: Batch,
        logits: Tensor,
        weights: Optional[Tensor],
        hyp: Optional[Hypotheses],
        energies: Optional[Tensor] = None,
    ) -> None:
        """Args: logits ``(B, T, V)``, or ``(N, V)`` at the real target positions only; weights ``(B, T, S)``
        and energies ``(B, h, T, S)`` teacher-forced (energies: for the saturation metrics, None where the
        model gives none); hyp decoded or None."""
        rec = teacher_forced_records(logits, batch.trg_out, batch.src_lengths, PAD_ID, weights, batch.alignment)
        rec["index"] = batch.index.float()
        if energies is not None:
            saturation, ranges = attention_saturation(energies, batch.trg_out != PAD_ID)
            rec.update(saturation)
            self.score_ranges.update(zip(batch.index.tolist(), (r.cpu() for r in ranges)))
        if self.text is not None:  # buckets of real text count source words, not subword tokens
            rec["src_len"] = torch.tensor([float(self.text.source_length(self.split, i)) for i in batch.index.tolist()])
        refs = [row[row != PAD_ID][:-1].tolist() for row in batch.trg_out]  # without EOS
        outputs = None
        if hyp is not None:
            outputs = hyp.to_lists()
            rec["exact"] = exact_match(outputs, refs)
            self.add_hypotheses(batch.index.tolist(), outputs)
        self._keep_examples(batch, refs, weights, hyp, outputs)
        self.records.append(rec)

    def add_hypotheses(self, index: list[int], outputs: list[list[int]]) -> None:
        """Decoded token ids of the examples ``index`` (what :meth:`translations` and the text scores read)."""
        self.hyps.extend(zip(index, outputs))
        self.decoded += len(index)

    def _keep_examples(self, batch, refs, weights, hyp, outputs) -> None:
        """Attention maps and texts of the fixed examples ``0..attention_examples-1``.

        Validation keeps the teacher-forced maps (rows: reference tokens), so the same
        examples are drawn at every validation; test keeps the decoded ones.
        """
        for row in (batch.index < self.attention_examples).nonzero().flatten().tolist():
            index, n_src = int(batch.index[row]), int(batch.src_lengths[row])
            src = batch.src[row, :n_src].tolist()
            if self.split == "val" or outputs is None:
                tokens = refs[row]
                rows = None if weights is None else weights[row, : len(tokens), :n_src].tolist()
            else:
                tokens = outputs[row]
                rows = None if hyp.weights is None else hyp.weights[row, : len(tokens), :n_src].tolist()
            item = {
                "index": index,
                "src": self._tokens(self.src_vocab, src),
                "hyp": self._tokens(self.trg_vocab, tokens),
            }
            item["ref"] = self._tokens(self.trg_vocab, refs[row])
            if outputs is not None:
                item["output"] = self._tokens(self.trg_vocab, outputs[row])
            self.attention_maps.append({**item, "weights": rows})

    @staticmethod
    def _tokens(vocab: Optional[Vocab], ids: list[int]) -> list:
        return vocab.decode(ids) if vocab else ids

    def merge_ranks(self) -> None:
        """Under DDP: gather every process's examples, so each holds the whole split, each example once.

        The batches a process repeats to even out the shards are dropped by example index.
        """
        records = [{k: v.detach().cpu() for k, v in r.items()} for r in self.records]
        gathered = all_gather((records, self.hyps, self.attention_maps, self.score_ranges))
        if len(gathered) == 1:
            return
        seen: set[int] = set()
        self.records, self.hyps, self.attention_maps = [], [], []
        self.score_ranges = {i: r for *_, ranges in gathered for i, r in ranges.items()}
        for records, *_ in gathered:
            for rec in records:
                index = rec["index"].long().tolist()
                keep = torch.tensor([i not in seen for i in index])
                seen.update(index)
                if keep.any():
                    self.records.append({k: v[keep] for k, v in rec.items()})
        self.hyps = sorted({i: ids for _, hyps, *_ in gathered for i, ids in hyps}.items())
        maps = {m["index"]: m for _, _, attention_maps, _ in gathered for m in attention_maps}
        self.attention_maps = [maps[i] for i in sorted(maps)]
        self.decoded = len(self.hyps)

    def _text_scores(self, edges: Sequence[int]) -> tuple[dict, dict]:
        if self.text is None or not self.hyps:
            return {}, {}
        return score_translations(self.translations(), edges)

    def translations(self) -> list[dict]:
        """Each decoded example of real text, by index: its source length in words, hypothesis and reference
        (what corpus-level statistics such as bootstrap intervals are computed from)."""
        if self.text is None:
            return []
        return [
            {
                "index": i,
                "src_len": self.text.source_length(self.split, i),
                "hyp": self.trg_vocab.to_text(ids, self.text.detokenize),
                "ref": self.text.reference(self.split, i),
            }
            for i, ids in sorted(self.hyps)
        ]

    def summary(self, edges: Sequence[int]) -> tuple[dict, list[dict]]:
        """Overall metrics and one row per source-length bucket.

        Exact match (and BLEU/chrF) cover the decoded examples only, which in
        validation are the first ``val_decode_limit``; the rest covers everything.
        """
        rec = concat_records(self.records)
        overall, buckets = summarize(rec), summarize_buckets(rec, edges)
        overall.update(range_medians([self.score_ranges[i] for i in sorted(self.score_ranges)]))
        decoded = [r for r in self.records if "exact" in r]
        if decoded:  # exact match of the decoded examples only, overall and per bucket
            decoded_rec = concat_records(decoded)
            overall["exact_match"] = summarize(decoded_rec)["exact_match"]
            by_label = {row["bucket"]: row for row in summarize_buckets(decoded_rec, edges)}
            for row in buckets:
                if row["bucket"] in by_label:
                    row["exact_match"] = by_label[row["bucket"]]["exact_match"]
        text_overall, text_buckets = self._text_scores(edges)
        overall.update(text_overall)
        for row in buckets:
            row.update({k: v for k, v in text_buckets.get(row["bucket"], {}).items() if k != "count"})
        return overall, buckets

    def sorted_attention_maps(self) -> list[dict]:
        """Kept examples by index: ``src``, ``hyp`` (the map rows), ``ref``, ``output`` if decoded, ``weights``."""
        return sorted(self.attention_maps, key=lambda m: m["index"])
