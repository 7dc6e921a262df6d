"""Per-example records and their summary per length bucket."""

import gzip
import math
from pathlib import Path

import pytest
import torch

from seq2seq_attn.metrics import (
    METRICS,
    attention_saturation,
    bucket_index,
    bucket_labels,
    concat_records,
    exact_match,
    metric_items,
    range_medians,
    summarize,
    summarize_buckets,
    teacher_forced_records,
    text_score_table,
    text_scores,
    title,
)


def test_bucket_edges_are_inclusive_upper_bounds():
    assert bucket_labels([10, 20]) == ["1-10", "11-20", "21+"]
    lengths = torch.tensor([1.0, 10.0, 11.0, 20.0, 21.0, 99.0])
    assert bucket_index(lengths, [10, 20]).tolist() == [0, 0, 1, 1, 2, 2]


def test_records_and_summaries_are_ratios_of_sums():
    logits = torch.full((2, 3, 5), -10.0)
    logits[0, 0, 4] = logits[0, 1, 2] = 10.0  # sentence 0: both tokens right
    logits[1, 0, 3] = 10.0  # sentence 1: first token wrong (gold 4)
    trg_out = torch.tensor([[4, 2, 0], [4, 4, 2]])
    weights = torch.tensor([[[1.0, 0.0]] * 3, [[0.5, 0.5]] * 3])
    alignment = torch.tensor([[0, -1, -1], [1, 0, -1]])
    rec = teacher_forced_records(logits, trg_out, torch.tensor([1, 9]), 0, weights, alignment)
    rec["exact"] = exact_match([[4], [4, 1]], [[4], [4, 4]])
    assert rec["tokens"].tolist() == [2, 3] and rec["correct"].tolist() == [2, 0]
    overall = summarize(concat_records([rec]))
    assert overall["token_acc"] == pytest.approx(2 / 5) and overall["exact_match"] == 0.5
    assert math.isclose(overall["ppl"], math.exp(overall["loss"]))
    # hits at (0,0) and (1,1): a tie resolves to source position 0, which is gold only at (1,1)
    assert overall["align_acc"] == pytest.approx(2 / 3)
    assert math.isclose(overall["attn_entropy"], 3 * math.log(2) / 5, rel_tol=1e-5)
    rows = summarize_buckets(rec, [5])
    assert [(r["bucket"], r["lo"], r["hi"]) for r in rows] == [("1-5", 1, 5), ("6+", 6, None)]
    assert rows[0]["exact_match"] == 1.0 and rows[1]["exact_match"] == 0.0


def test_records_from_the_real_positions_equal_full_logits_and_a_float64_reference():
    torch.manual_seed(0)
    trg_out = torch.randint(3, 50, (4, 7))
    trg_out[1, 3:] = trg_out[3, 5:] = 0  # padding after the real tokens
    real = trg_out != 0
    logits = (torch.randn(4, 7, 50) * 4).bfloat16()  # what the output layer gives under bf16 autocast
    logits[0, 0, 9] = logits[0, 0].max()  # a tie: argmax takes the first maximum, in both layouts
    full = teacher_forced_records(logits, trg_out, torch.tensor([3, 4, 5, 6]), 0)
    selected = teacher_forced_records(logits[real], trg_out, torch.tensor([3, 4, 5, 6]), 0)
    assert all(torch.equal(full[k], selected[k]) for k in full)
    ref = torch.nn.functional.cross_entropy(logits.double().transpose(1, 2), trg_out, ignore_index=0, reduction="none")
    assert torch.allclose(full["nll"].double(), ref.sum(1), rtol=1e-6, atol=0)
    hits = (logits.double().argmax(-1) == trg_out) & real
    assert full["correct"].tolist() == hits.sum(1).tolist() and full["tokens"].tolist() == [7, 3, 7, 5]


def test_text_score_table_equals_sacrebleu_on_each_bucket_of_real_text():
    from sacrebleu.metrics import BLEU, CHRF

    folder = Path(__file__).parent / "data" / "corpora" / "bible_en_es"
    src, refs = (
        gzip.open(folder / f"dev.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:120]
        for lang in "en es".split()
    )
    hyps = [" ".join(r.split()[: 3 + i % 9]) + (" de la" if i % 4 else "") for i, r in enumerate(refs)]  # varied
    lengths = [len(s.split()) for s in src]
    edges = [10, 20, 30]
    overall, by_bucket = text_score_table(hyps, refs, lengths, edges, length_ratio=True)
    assert len(by_bucket) >= 3 and sum(row["count"] for row in by_bucket.values()) == len(hyps)
    bucket_of = bucket_index(torch.tensor(lengths, dtype=torch.float), edges).tolist()
    labels = bucket_labels(edges)
    parts = {"all": (overall, range(len(hyps)))}
    parts.update(
        {label: (row, [i for i, b in enumerate(bucket_of) if labels[b] == label]) for label, row in by_bucket.items()}
    )
    for label, (scores, members) in parts.items():  # each equal to sacreBLEU's corpus score of its sentences
        h, r = [hyps[i] for i in members], [[refs[i] for i in members]]
        bleu = BLEU().corpus_score(h, r)
        expected = {"bleu": bleu.score, "chrf": CHRF().corpus_score(h, r).score, "length_ratio": bleu.ratio}
        assert {k: scores[k] for k in expected} == expected, label
    assert text_scores(hyps, refs) == {k: overall[k] for k in ("bleu", "chrf")}
    assert text_score_table([], [], [], edges) == ({}, {})


def test_metric_items_leave_out_labels_bounds_and_counts():
    row = {"bucket": "1-5", "lo": 1, "hi": 5, "count": 3.0, "bleu": 20.0, "loss": 1.5}
    assert dict(metric_items(row)) == {"bleu": 20.0, "loss": 1.5}
    assert METRICS["loss"].lower_is_better and not METRICS["bleu"].lower_is_better
    assert title("align_lag1_acc") == "alignment accuracy, one step behind" and title("custom") == "custom"


def test_alignment_accuracy_rewards_gold_attention():
    gold = torch.tensor([[3, 2, 1, 0, -1]])  # reverse of 4 tokens, then EOS
    trg_out = torch.tensor([[5, 6, 7, 8, 2]])
    logits = torch.zeros(1, 5, 10)
    hit = torch.zeros(1, 5, 4)
    hit[0, torch.arange(4), gold[0, :4]] = 1.0
    hit[0, 4] = 0.25
    shuffled = hit[:, :, torch.tensor([1, 0, 3, 2])]
    lengths = torch.tensor([4])
    perfect = summarize(teacher_forced_records(logits, trg_out, lengths, 0, hit, gold))
    wrong = summarize(teacher_forced_records(logits, trg_out, lengths, 0, shuffled, gold))
    assert perfect["align_acc"] == 1.0 and wrong["align_acc"] < 1.0
    lagging = hit.roll(1, dims=1)  # step t looks where step t-1 should have looked
    lagged = summarize(teacher_forced_records(logits, trg_out, lengths, 0, lagging, gold))
    assert lagged["align_lag1_acc"] == 1.0 and lagged["align_acc"] < 0.5 and perfect["align_lag1_acc"] < 0.5
    assert perfect["attn_entropy"] == pytest.approx(torch.log(torch.tensor(4.0)).item() / 5, rel=1e-5)


def test_saturation_counts_one_hot_rows_and_score_ranges_by_hand():
    inf = float("inf")
    energies = torch.tensor(
        [
            [[10.0, 0.0, -inf], [1.0, 0.0, -1.0], [3.0, -inf, -inf], [0.0, 9.0, 0.0]],  # row 2: one position
            [[0.0, 0.5, -inf], [20.0, -5.0, -inf], [0.0, 0.0, -inf], [7.0, 7.0, -inf]],
        ]
    ).unsqueeze(1)  # (B=2, h=1, T=4, S=3)
    real = torch.tensor([[True, True, True, False], [True, True, True, True]])  # step 3 of sentence 0: padding
    rec, ranges = attention_saturation(energies, real)
    # e^10 / (e^10 + 1) = 0.99995 > 0.99; softmax([1, 0, -1]) tops at 0.665; the one-position row is not counted
    assert rec["sat_rows"].tolist() == [1.0, 1.0] and rec["sat_steps"].tolist() == [2.0, 4.0]
    assert ranges[0].flatten().tolist() == [10.0, 2.0] and ranges[1].flatten().tolist() == [0.5, 25.0, 0.0, 0.0]
    overall = summarize({"src_len": torch.tensor([3.0, 2.0]), **rec})
    assert overall["attn_saturated"] == pytest.approx(2 / 6)
    assert range_medians(ranges) == {"score_range": pytest.approx(1.25)}  # median of 0, 0, 0.5, 2, 10, 25


def test_saturation_is_counted_per_head_against_the_heads_own_weights():
    torch.manual_seed(0)
    energies = torch.randn(3, 4, 5, 6) * torch.tensor([0.1, 1.0, 10.0, 100.0]).view(1, 4, 1, 1)  # (B, h, T, S)
    energies[:, :, :, 4:] = float("-inf")  # the last two source positions are padding
    real = torch.ones(3, 5, dtype=torch.bool)
    rec, ranges = attention_saturation(energies, real)
    overall = {**summarize({"src_len": torch.full((3,), 4.0), **rec}), **range_medians(ranges)}
    weights = energies.softmax(-1)  # (B, h, T, S)
    for head in range(4):
        share = (weights[:, head].amax(-1) > 0.99).float().mean()
        assert overall[f"attn_saturated_h{head + 1}"] == pytest.approx(float(share))
        real_scores = energies[:, head, :, :4]  # (B, T, 4)
        spread = (real_scores.amax(-1) - real_scores.amin(-1)).flatten()
        assert overall[f"score_range_h{head + 1}"] == pytest.approx(float(spread.double().quantile(0.5)))
    assert overall["attn_saturated_h1"] == 0.0 and overall["attn_saturated_h4"] > 0.7  # the scale shows
    assert overall["attn_saturated"] == pytest.approx(float((weights.amax(-1) > 0.99).float().mean()))
    assert title("attn_saturated_h3") == f"{METRICS['attn_saturated'].title}, head 3"
