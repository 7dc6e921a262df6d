"""Decoding speed of a trained checkpoint, measured the way OpenNMT-py reports its own.

    python benchmarks/decode_speed.py CKPT SOURCE [--out-dir DIR] [--json FILE] [--beams 1 5] [--alpha A] [--int8]

Loads the checkpoint, tokenises SOURCE (one sentence per line, e.g. test_2016_flickr.de),
then times decoding alone (OpenNMT-py's "Generation took ... sec": no model load, no
tokenisation, no file writing), greedy and beam 5, 64 sentences per batch (``--batch-size``),
with the peer harness's settings: no length penalty (alpha 0, OpenNMT-py's default) and at most 100
output tokens (``-max_length 100``). Writes each output to DIR/beam{K}.txt, so BLEU is
scored on exactly the text that was timed (benchmarks/harness_bleu.py). ``--alpha A`` decodes
with the length penalty of Wu et al. (2016) instead, into DIR/beam{K}_alpha{A}.txt; ``--int8``
decodes with int8 weights (seq2seq_attn/quantize.py), into DIR/beam{K}_int8.txt.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch

from seq2seq_attn.cpu import configure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ckpt")
    parser.add_argument("source")
    parser.add_argument("--out-dir", default=".", help="where beam{K}.txt go")
    parser.add_argument("--json", help="also write the numbers here")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (the harness's 64)")
    parser.add_argument("--alpha", type=float, default=0.0, help="length penalty (the harness decodes with 0)")
    parser.add_argument("--int8", action="store_true", help="int8 weights (dynamic quantisation)")
    args = parser.parse_args()
    configure()
    torch.set_num_threads(args.threads)

    from seq2seq_attn.inference import load_model, text_codec, translate_tokens

    module = load_model(args.ckpt, int8=args.int8)
    module.hparams.max_len_a, module.hparams.max_len_b = 0.0, 100  # the harness's -max_length 100
    codec = text_codec(module)
    lines = Path(args.source).read_text(encoding="utf-8").splitlines()
    sentences = [codec.tokenize(line) for line in lines]
    translate_tokens(module, sentences[:64], 1)  # warm-up: first calls allocate
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for beam in args.beams:
        start = time.perf_counter()
        outputs = translate_tokens(module, sentences, beam, args.alpha, args.batch_size, attention=False)
        seconds = time.perf_counter() - start
        suffix = (f"_alpha{args.alpha}" if args.alpha else "") + ("_int8" if args.int8 else "")
        name = f"beam{beam}{suffix}"
        (out_dir / f"{name}.txt").write_text("".join(codec.detokenize(t.tokens) + "\n" for t in outputs))
        key = ("greedy" if beam == 1 else f"beam{beam}") + suffix
        results[key] = {"sentences": len(lines), "decode_s": round(seconds, 3), "sents_per_s": len(lines) / seconds}
        results[key]["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY") or "default"
        print(f"{key}: {len(lines)} sentences in {seconds:.2f} s = {len(lines) / seconds:.1f} sent/s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
