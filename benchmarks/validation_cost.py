"""What one validation of the converge protocol costs, part by part, and what its faster scoring saves.

    python benchmarks/validation_cost.py CELL [--threads 2] [--repeats 2]

CELL is a trained cell's run folder (``config.yaml``, ``precision.json``, ``checkpoints/best.ckpt``), e.g. one of
``$S2S_RUNS_ROOT/ablations/bible_scorers/cells/*``. Its dev split is validated the way the trainer does it
(every batch teacher-forced, then decoded greedily; in the cell's precision) and timed in three parts:

- ``teacher-forced``: the forward pass and the per-example loss and token accuracy;
- ``greedy``: greedy decoding of every dev sentence;
- ``scoring``: BLEU, chrF and the length ratio, overall and per source-length bucket.

The first and the last are timed twice, alternating, in the same run: as the package computes them now
(logits at the real target positions only, fp32 cross-entropy and argmax on a contiguous ``(N, V)`` block;
sacreBLEU's sentence statistics extracted once and summed per bucket) and as they were computed before
(logits at every position, ``F.cross_entropy`` over the class dimension of a ``(B, V, T)`` view under autocast,
``argmax`` over bf16; ``corpus_score`` once overall and once per bucket). It checks that both give the same
token accuracy and the same scores, prints the loss of both against a float64 reference, and ends with the
ratios. Run it while nothing else runs on the machine.
"""

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

from seq2seq_attn.cpu import configure
from seq2seq_attn.data import ParallelDataModule
from seq2seq_attn.data.vocab import PAD_ID
from seq2seq_attn.inference import load_model
from seq2seq_attn.metrics import bucket_index, bucket_labels, teacher_forced_records, text_score_table
from seq2seq_attn.precision import cpu_description
from seq2seq_attn.search import SearchSettings, search


def old_records(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss and correct tokens per example as validation computed them before: full logits ``(B, T, V)``."""
    logits = model(batch.src, batch.src_lengths, batch.trg_in).logits  # (B, T, V)
    real = batch.trg_out != PAD_ID  # (B, T)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.trg_out, ignore_index=PAD_ID, reduction="none")  # (B, T)
    correct = (logits.argmax(-1) == batch.trg_out) & real  # (B, T)
    return nll.sum(1), correct.sum(1).float()


def new_records(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss and correct tokens per example as :class:`EvaluationSteps` computes them now."""
    real = batch.trg_out != PAD_ID  # (B, T)
    logits = model(batch.src, batch.src_lengths, batch.trg_in, select=real).logits  # (N, V)
    rec = teacher_forced_records(logits, batch.trg_out, batch.src_lengths, PAD_ID)
    return rec["nll"], rec["correct"]


def float64_nll(model, batch) -> torch.Tensor:
    """The loss per example from the same logits, in float64: what both are compared with."""
    logits = model(batch.src, batch.src_lengths, batch.trg_in).logits.double()  # (B, T, V)
    nll = F.cross_entropy(logits.transpose(1, 2), batch.trg_out, ignore_index=PAD_ID, reduction="none")
    return nll.sum(1)


def old_scores(hyps, refs, lengths, edges) -> tuple[dict, dict]:
    """BLEU, chrF and the length ratio as scored before: ``corpus_score`` overall, then again per bucket."""
    from sacrebleu.metrics import BLEU, CHRF

    def score(h, r):
        bleu = BLEU().corpus_score(h, [r])
        return {"bleu": bleu.score, "chrf": CHRF().corpus_score(h, [r]).score, "length_ratio": float(bleu.ratio)}

    index = bucket_index(torch.tensor(lengths, dtype=torch.float), edges).tolist()
    by_bucket = {}
    for i, label in enumerate(bucket_labels(edges)):
        members = [j for j, b in enumerate(index) if b == i]
        if members:
            by_bucket[label] = {
                "count": float(len(members)),
                **score([hyps[j] for j in members], [refs[j] for j in members]),
            }
    return score(hyps, refs), by_bucket


def timed(clock: dict, key: str, run, *args):
    """``run(*args)``, its seconds added to ``clock[key]``."""
    start = time.perf_counter()
    out = run(*args)
    clock[key] = clock.get(key, 0.0) + time.perf_counter() - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", type=Path, help="a trained cell's run folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="validations timed per variant (alternating)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    configure()
    config = yaml.safe_load((args.cell / "config.yaml").read_text(encoding="utf-8"))
    precision = json.loads((args.cell / "precision.json").read_text(encoding="utf-8"))["precision"]
    data = ParallelDataModule(**config["data"]["init_args"])
    data.setup("validate")
    module = load_model(args.cell / "checkpoints" / "best.ckpt")
    model, hp, edges = module.model, module.hparams, list(config["model"]["test_buckets"])
    settings = SearchSettings(1, hp.alpha, hp.max_len_a, hp.max_len_b)
    batches = list(data.val_dataloader())
    bf16 = precision.startswith("bf16")
    cpu, flags = cpu_description()
    features = ", ".join(flags) or "no bf16 instructions"
    print(f"{cpu} ({features}), {args.threads} threads, {precision}, torch {torch.__version__}")
    print(f"cell {args.cell.name}: {sum(len(b) for b in batches)} dev sentences in {len(batches)} batches")

    clock: dict[str, float] = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(args.repeats):
            old = [timed(clock, "teacher-forced, before", old_records, model, b) for b in batches]
            new = [timed(clock, "teacher-forced, now", new_records, model, b) for b in batches]
        hyps = [timed(clock, "greedy", search, model, b.src, b.src_lengths, settings) for b in batches]
        float64 = torch.cat([float64_nll(model, b) for b in batches])  # from the same (bf16) logits
    same_accuracy = torch.equal(torch.cat([c for _, c in old]), torch.cat([c for _, c in new]))
    for name, rows in (("before", old), ("now", new)):
        nll = torch.cat([n for n, _ in rows]).double()
        error = ((nll - float64).abs() / float64).max().item()
        print(f"loss {name}: {nll.sum() / sum(int((b.trg_out != PAD_ID).sum()) for b in batches):.6f} per token, "
              f"largest relative error of an example's loss against float64 {error:.1e}")  # fmt: skip

    texts = {}
    for batch, hyp in zip(batches, hyps):
        for i, ids in zip(batch.index.tolist(), hyp.to_lists()):
            texts[i] = module.trg_vocab.to_text(ids, data.detokenize)
    order = sorted(texts)
    hyp_text = [texts[i] for i in order]
    refs = [data.reference("val", i) for i in order]
    lengths = [data.source_length("val", i) for i in order]
    for _ in range(args.repeats):
        before = timed(clock, "scoring, before", old_scores, hyp_text, refs, lengths, edges)
        now = timed(clock, "scoring, now", text_score_table, hyp_text, refs, lengths, edges, True)
    same_scores = before == now
    print(f"dev BLEU {now[0]['bleu']:.2f}; token accuracy identical: {same_accuracy}; scores identical: {same_scores}")

    per = {key: seconds / (1 if key == "greedy" else args.repeats) for key, seconds in clock.items()}
    total_before = per["teacher-forced, before"] + per["greedy"] + per["scoring, before"]
    total_now = per["teacher-forced, now"] + per["greedy"] + per["scoring, now"]
    print(f"\n{'part of one validation':<28}{'seconds':>9}{'share now':>11}")
    for key in ("teacher-forced, before", "teacher-forced, now", "greedy", "scoring, before", "scoring, now"):
        share = "" if key.endswith("before") else f"{per[key] / total_now:>10.0%}"
        print(f"{key:<28}{per[key]:>9.2f}{share:>11}")
    print(f"{'validation, before':<28}{total_before:>9.2f}\n{'validation, now':<28}{total_now:>9.2f}")
    ratio = {part: per[f"{part}, before"] / per[f"{part}, now"] for part in ("teacher-forced", "scoring")}
    print(f"\nratios (before / now): teacher-forced {ratio['teacher-forced']:.2f}x, scoring {ratio['scoring']:.2f}x, "
          f"validation {total_before / total_now:.2f}x")  # fmt: skip
    if not (same_accuracy and same_scores):
        raise SystemExit("the two ways disagree: see above")


if __name__ == "__main__":
    main()
