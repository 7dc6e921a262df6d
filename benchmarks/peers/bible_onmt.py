"""OpenNMT-py's Luong general + input feeding on the Bible length study's data, scored like our cells.

    S2S_DATA_ROOT=DIR python benchmarks/peers/bible_onmt.py --work PEER_DIR --onmt ONMT_VENV/bin [--steps 1600]
        [--train-max-words 30]
        [--out docs/results/bible_en_es_attention/onmt_general]

The peer sees what our Bible cells see (experiments/bible_en_es/base.yaml): the BPE pieces of our data
module (8k per side, trained on train), the training pairs it keeps (at most 80 pieces a side; with
``--train-max-words``, as a capped cell, at most that many words a side), the same sizes (embeddings 256,
biGRU 256 per direction, GRU decoder 512, dropout 0.2), Adam 1e-3, the loss averaged over target tokens
(``normalization: tokens``; OpenNMT-py's default sums per sentence, which makes the gradient about 35 times
larger here, so that the clipping below would act on every update), gradient norm clipped at 1, batches of
64 pairs and the same number of updates. What stays OpenNMT-py's own, as its users run it: its
initialisation (uniform ±0.1), its bridge (``bridge: true``, a ReLU layer, where ours is tanh) and Luong's
unscaled general score. A checkpoint every 200 updates is decoded greedily on the whole dev split (our
validation), the one with the best dev perplexity (our ``best.ckpt``) on test with beam 5 and Wu et al.'s
length penalty α = 0.6; the pieces are joined back with our tokenizer and scored with sacreBLEU's defaults
against the raw references, overall and per 10-word source bucket
(:func:`seq2seq_attn.metrics.text_score_table`), as our cells are.

Writes a cell folder like our ablation cells' into ``--out``: ``cell.json``, ``result.json`` and
``test_results.json`` (overall and per bucket), ``test_translations.jsonl.gz`` (what the statistics read) and
``val_history.jsonl`` (one line per checkpoint: step, dev BLEU and chrF overall and per bucket, OpenNMT-py's
dev perplexity, and ``seconds``: OpenNMT-py's clock at that step, read from its log's timestamps, plus the
greedy dev decodes so far, as our cells' clocks include their validations), so ``seq2seq-attn report`` of the
folder above it puts the peer in the tables, the intervals and the paired tests, and
``benchmarks/time_to_quality.py`` times it to a dev target; the peer's own files (data, config, checkpoints,
logs) stay in ``--work``.
"""

import argparse
import os
import re
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from seq2seq_attn.data.parallel import ParallelDataModule
from seq2seq_attn.metrics import DEFAULT_BUCKETS, buckets, sacrebleu_signature, text_score_table
from seq2seq_attn.results import append_jsonl, environment_info, write_json, write_jsonl_gz

CELL = "system=opennmt-py__flow=luong__attention=general__input_feed=true"
OVERRIDES = {"system": "opennmt-py", "model.flow": "luong", "model.attention": "general", "model.input_feed": True}
CONFIG = """# OpenNMT-py 3.5.1, written by benchmarks/peers/bible_onmt.py
save_data: {work}/run/data
save_model: {work}/run/model
overwrite: true
src_vocab: {work}/data/vocab.src
tgt_vocab: {work}/data/vocab.trg
src_vocab_size: 8000
tgt_vocab_size: 8000
src_words_min_frequency: 0
tgt_words_min_frequency: 0
data:
    corpus_1: {{path_src: {work}/data/train.src, path_tgt: {work}/data/train.trg}}
    valid: {{path_src: {work}/data/val.src, path_tgt: {work}/data/val.trg}}
seed: {seed}
world_size: 1
gpu_ranks: []
num_workers: 0
encoder_type: brnn
decoder_type: rnn
rnn_type: GRU
enc_layers: 1
dec_layers: 1
enc_hid_size: 512
dec_hid_size: 512
word_vec_size: 256
global_attention: general
input_feed: 1
bridge: true
dropout: [0.2]
param_init: 0.1
optim: adam
learning_rate: 0.001
adam_beta1: 0.9
adam_beta2: 0.999
decay_method: none
start_decay_steps: 100000000
max_grad_norm: 1
normalization: tokens
batch_type: sents
batch_size: 64
valid_batch_size: 64
train_steps: {steps}
valid_steps: {every}
save_checkpoint_steps: {every}
keep_checkpoint: -1
report_every: 50
log_file: {work}/run/train.log
"""


def export(data: ParallelDataModule, work: Path) -> None:
    """Our data module's examples as piece files, one sentence a line: the training pairs it keeps, every
    dev and test line; the pieces are those of our vocabulary (``<unk>`` where ours has none)."""
    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"src": Counter(), "trg": Counter()}
    for split in ("train", "val", "test"):
        for side, vocab in (("src", data.src_vocab), ("trg", data.trg_vocab)):
            lines = [vocab.decode(getattr(e, side)) for e in data.datasets[split].examples]
            if split == "train":
                counts[side].update(p for line in lines for p in line)
            (folder / f"{split}.{side}").write_text("".join(f"{' '.join(x)}\n" for x in lines), encoding="utf-8")
    for side, counter in counts.items():
        (folder / f"vocab.{side}").write_text("".join(f"{p}\t{n}\n" for p, n in counter.most_common()), "utf-8")


def run(command: list[str], log: Path) -> float:
    """Run an OpenNMT-py command (its checkpoints hold argparse objects: torch.load needs weights_only off)."""
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    start = time.time()
    with open(log, "w") as handle:
        subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, check=True)
    return time.time() - start


LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO\] (?:Step (\d+)/)?")


def training_clock(log: str) -> dict[int, float]:
    """Seconds from the first timestamped line of OpenNMT-py's console log to each step it reports (``Step
    N/M; acc: ...``, every ``report_every`` updates): training and its own dev-perplexity passes, as its users
    see the clock run."""
    start, clock = None, {}
    for line in log.splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
        start = stamp if start is None else start
        if match.group(2):
            clock[int(match.group(2))] = (stamp - start).total_seconds()
    return clock


def translate(onmt: Path, checkpoint: Path, source: Path, output: Path, beam: int) -> float:
    command = [str(onmt / "onmt_translate"), "-model", str(checkpoint), "-src", str(source), "-output", str(output),
               "-beam_size", str(beam), "-batch_size", "64", "-batch_type", "sents", "-max_length", "250", "-gpu",
               "-1"]  # fmt: skip
    if beam > 1:
        command += ["-length_penalty", "wu", "-alpha", "0.6"]
    return run(command, output.with_suffix(".log"))


def score(data: ParallelDataModule, split: str, output: Path) -> tuple[dict, dict, list[dict]]:
    """BLEU and chrF of a piece file against the raw references, overall and per source-length bucket."""
    pieces = output.read_text(encoding="utf-8").splitlines()
    hyps = [data.detokenize(line.split()) for line in pieces]
    refs = [data.reference(split, i) for i in range(len(hyps))]
    lengths = [data.source_length(split, i) for i in range(len(hyps))]
    rows = [{"index": i, "src_len": n, "hyp": h, "ref": r} for i, (n, h, r) in enumerate(zip(lengths, hyps, refs))]
    return (*text_score_table(hyps, refs, lengths, DEFAULT_BUCKETS), rows)


def bucket_rows(by_bucket: dict) -> list[dict]:
    """Per-bucket scores as our cells' rows: label, bounds, count, metrics."""
    bounds = {b.label: b for b in buckets(DEFAULT_BUCKETS)}
    return [{"bucket": label, "lo": bounds[label].lo, "hi": bounds[label].hi, **values}
            for label, values in by_bucket.items()]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True, help="the peer's own files (outside the repository)")
    parser.add_argument("--onmt", required=True, help="the bin folder of a venv with OpenNMT-py 3.5.1")
    parser.add_argument(
        "--out",
        default=f"docs/results/bible_en_es_attention/cells/{CELL}",
        help="a cell folder of an ablation's published results: its report includes the peer",
    )
    parser.add_argument("--steps", type=int, default=1600)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-max-words", type=int, help="train on pairs of at most this many words (a cap)")
    args = parser.parse_args()
    work, onmt, out = Path(args.work).resolve(), Path(args.onmt).resolve(), Path(args.out)
    data = ParallelDataModule(corpus="bible_en_es", src_lang="en", trg_lang="es", tokenizer="bpe", vocab_size=8000,
                              min_freq=2, max_length=80, train_max_words=args.train_max_words)  # fmt: skip
    data.setup()  # reads the dev and test text too
    export(data, work)
    (work / "run").mkdir(exist_ok=True)
    config = work / "onmt_general.yaml"
    config.write_text(CONFIG.format(work=work, seed=args.seed, steps=args.steps, every=args.every))
    train_seconds = run([str(onmt / "onmt_train"), "-config", str(config)], work / "run" / "stdout.log")
    log = (work / "run" / "stdout.log").read_text()  # its log_file stops before training; the console has it all
    steps = range(args.every, args.steps + 1, args.every)  # it validates once every `every` updates, in order
    perplexity = dict(zip(steps, map(float, re.findall(r"Validation perplexity: ([\d.]+)", log))))
    clock, decoding = training_clock(log), 0.0
    (out / "val_history.jsonl").unlink(missing_ok=True)
    for step in steps:
        hyp = work / "run" / f"val_step{step}.txt"
        seconds = translate(onmt, work / "run" / f"model_step_{step}.pt", work / "data" / "val.src", hyp, beam=1)
        decoding += seconds  # our validations decode dev inside the clock: the peer's count as if they did too
        overall, by_bucket, _ = score(data, "val", hyp)
        record = {"step": step, "seconds": clock[step] + decoding if step in clock else None,
                  "validation_seconds": seconds, "overall": {**overall, "ppl": perplexity.get(step)},
                  "buckets": bucket_rows(by_bucket)}  # fmt: skip
        append_jsonl(out / "val_history.jsonl", record)
        print(f"step {step}: dev BLEU {overall['bleu']:.2f}, ppl {perplexity.get(step)}", flush=True)
    best = min(perplexity, key=perplexity.get) if perplexity else args.steps
    hyp = work / "run" / f"test_step{best}_beam5.txt"
    translate(onmt, work / "run" / f"model_step_{best}.pt", work / "data" / "test.src", hyp, beam=5)
    overall, by_bucket, rows = score(data, "test", hyp)
    meta = {"system": "OpenNMT-py 3.5.1", "attention": "general", "flow": "luong", "input_feed": True,
            "checkpoint_step": best, "beam_size": 5, "alpha": 0.6, "sacrebleu": sacrebleu_signature()}  # fmt: skip
    results = {"meta": meta, "overall": {"count": float(len(rows)), **overall}, "buckets": bucket_rows(by_bucket)}
    write_json(out / "test_results.json", results)
    training = {"fit_seconds": round(train_seconds, 1), "steps": args.steps, "stopped_by": "trainer.max_steps",
                "stopped_short": None, "hit_cap": None, "best_step": best, "precision": "32-true"}  # fmt: skip
    write_json(out / "result.json", {**results, **training})
    cap = {"data.init_args.train_max_words": args.train_max_words} if args.train_max_words else {}
    write_json(out / "cell.json", {"name": CELL, "overrides": {**OVERRIDES, **cap, "seed_everything": args.seed}})
    write_jsonl_gz(out / "test_translations.jsonl.gz", rows)
    write_json(out / "environment.json", environment_info())
    (out / "onmt_general.yaml").write_text(config.read_text().replace(str(work), "PEER_DIR"))
    print(f"test BLEU {overall['bleu']:.2f} (checkpoint of step {best}, beam 5); trained in {train_seconds:.0f} s")


if __name__ == "__main__":
    main()
