"""Decoding speed of a trained checkpoint, measured the way OpenNMT-py reports its own.

    python benchmarks/decode_speed.py CKPT SOURCE [--out-dir DIR] [--json FILE] [--beams 1 5] [--alpha A] [--int8]

Loads the checkpoint, tokenises SOURCE (one sentence per line, e.g. test_2016_flickr.de),
then times decoding alone (OpenNMT-py's "Generation took ... sec": no model load, no
tokenisation, no file writing), greedy and beam 5, 64 sentences per batch (``--batch-size``),
with the peer harness's settings: no length penalty (alpha 0, OpenNMT-py's default) and at most 100
output tokens (``-max_length 100``). Writes each output to DIR/beam{K}.txt, so BLEU is
scored on exactly the text that was timed (benchmarks/peers/harness_bleu.py). ``--alpha A`` decodes
with the length penalty of Wu et al. (2016) instead, into DIR/beam{K}_alpha{A}.txt; ``--int8``
decodes with int8 weights (seq2seq_attn/quantize.py), into DIR/beam{K}_int8.txt, and also
times the output layer's product at the decoder's shapes in fp32 and int8 in the same run.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch

from seq2seq_attn.cpu import configure
from seq2seq_attn.profiling import flop_rate


def linear_rate(layer: torch.nn.Module, rows: int, seconds: float = 1.0) -> float:
    """GFLOP/s of ``layer`` (a Linear, float or dynamically quantised) on ``rows`` random inputs."""
    weight = layer.weight() if callable(layer.weight) else layer.weight  # quantised layers expose a method
    x = torch.randn(rows, weight.shape[1])
    with torch.no_grad():
        return flop_rate(lambda: layer(x), 2 * rows * weight.numel(), seconds)


def output_layer_rates(int8_layer: torch.nn.Module) -> dict:
    """The output layer's product at 64 rows (a full batch) and 8 (its last sentences), fp32 vs int8."""
    weight = int8_layer.weight().dequantize()  # (V, F)
    fp32 = torch.nn.Linear(weight.shape[1], weight.shape[0])
    rates = {}
    for rows in (64, 8):
        rates[f"fp32_{rows}"] = linear_rate(fp32, rows)
        rates[f"int8_{rows}"] = linear_rate(int8_layer, rows)
    size = f"({weight.shape[1]} -> {weight.shape[0]})"
    print(
        f"output layer {size} GFLOP/s: 64 rows fp32 {rates['fp32_64']:.0f}, int8 {rates['int8_64']:.0f}; "
        f"8 rows fp32 {rates['fp32_8']:.0f}, int8 {rates['int8_8']:.0f}",
        flush=True,
    )
    return rates


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
    if args.int8:
        results["output_layer_gflops"] = output_layer_rates(module.model.decoder.output)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
