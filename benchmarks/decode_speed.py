"""Decoding speed of a trained checkpoint, measured the way OpenNMT-py reports its own.

    python benchmarks/decode_speed.py CKPT SOURCE [--out-dir DIR] [--json FILE] [--beams 1 5] [--alpha A] [--int8]
    python benchmarks/decode_speed.py CKPT SOURCE --precisions fp32 bf16 int8 --ref REFERENCE [--alpha A]

Loads the checkpoint, tokenises SOURCE (one sentence per line, e.g. test_2016_flickr.de),
then times decoding alone (OpenNMT-py's "Generation took ... sec": no model load, no
tokenisation, no file writing), greedy and beam 5, 64 sentences per batch (``--batch-size``),
with the peer harness's settings: no length penalty (alpha 0, OpenNMT-py's default) and at most 100
output tokens (``-max_length 100``). Writes each output to DIR/beam{K}.txt, so BLEU is
scored on exactly the text that was timed (benchmarks/peers/harness_bleu.py). ``--alpha A`` decodes
with the length penalty of Wu et al. (2016) instead, into DIR/beam{K}_alpha{A}.txt; ``--int8``
decodes with int8 weights (seq2seq_attn/quantize.py), into DIR/beam{K}_int8.txt, and also
times the output layer's product at the decoder's shapes in fp32 and int8 in the same run.

``--precisions fp32 bf16 int8`` decodes the same checkpoint in each number format in turn (bf16: the
weights cast once, as ``translate --precision bf16`` does; int8: as ``--int8``), into
DIR/beam{K}[_alpha{A}]_{precision}.txt, and with ``--ref`` scores each output with sacreBLEU; it ends with
the speed ratios against fp32, which formats are within 0.3 BLEU of fp32 in every beam, the fastest of
those, and what ``translate --precision auto`` picks on this CPU (its GEMM probe).
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


def decode(args, number_format: str, lines: list[str], references, out_dir: Path, tagged: bool) -> dict:
    """Time greedy/beam decoding of ``lines`` in one number format; BLEU where there are references."""
    import contextlib

    from seq2seq_attn.inference import load_model, text_codec, translate_tokens
    from seq2seq_attn.precision import bf16_weights

    module = load_model(args.ckpt, int8=number_format == "int8")
    module.hparams.max_len_a, module.hparams.max_len_b = 0.0, 100  # the harness's -max_length 100
    codec = text_codec(module)
    sentences = [codec.tokenize(line) for line in lines]
    results = {}
    with bf16_weights(module.model) if number_format == "bf16" else contextlib.nullcontext():
        translate_tokens(module, sentences[:64], 1)  # warm-up: first calls allocate
        for beam in args.beams:
            start = time.perf_counter()
            outputs = translate_tokens(module, sentences, beam, args.alpha, args.batch_size, attention=False)
            seconds = time.perf_counter() - start
            suffix = f"_alpha{args.alpha}" if args.alpha else ""
            suffix += f"_{number_format}" if tagged else ("_int8" if number_format == "int8" else "")
            texts = [codec.detokenize(t.tokens) for t in outputs]
            (out_dir / f"beam{beam}{suffix}.txt").write_text("".join(text + "\n" for text in texts))
            key = ("greedy" if beam == 1 else f"beam{beam}") + suffix
            row = {"sentences": len(lines), "decode_s": round(seconds, 3), "sents_per_s": len(lines) / seconds}
            row["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY") or "default"
            row.update(precision=number_format, beam=beam)
            shown = ""
            if references is not None:
                import sacrebleu

                row["bleu"] = sacrebleu.corpus_bleu(texts, [references]).score
                shown = f", BLEU {row['bleu']:.2f}"
            results[key] = row
            rate = f"{len(lines)} sentences in {seconds:.2f} s = {len(lines) / seconds:.1f} sent/s"
            print(f"{key}: {rate}{shown}", flush=True)
    if number_format == "int8":
        results[f"output_layer_gflops{'_int8' if tagged else ''}"] = output_layer_rates(module.model.decoder.output)
    return results


def compare(results: dict, formats: list[str], beams: list[int], tolerance: float = 0.3) -> None:
    """Speed against fp32 per beam; the fastest format within ``tolerance`` BLEU of fp32; auto's pick."""
    from seq2seq_attn.precision import decoding_precision

    rows = {(r["precision"], r["beam"]): r for r in results.values() if isinstance(r, dict) and "precision" in r}
    speed = {f: sum(rows[f, beam]["sents_per_s"] for beam in beams) / len(beams) for f in formats}
    print("against fp32 in this run:")
    for beam in beams:
        base = rows["fp32", beam]
        for number_format in formats[1:] if formats[0] == "fp32" else formats:
            row = rows[number_format, beam]
            bleu = f", BLEU {row['bleu'] - base['bleu']:+.2f}" if "bleu" in row else ""
            print(f"  beam {beam} {number_format}: {row['sents_per_s'] / base['sents_per_s']:.2f}x sent/s{bleu}")
    if all("bleu" in row for row in rows.values()):

        def equal(number_format: str) -> bool:
            return all(abs(rows[number_format, b]["bleu"] - rows["fp32", b]["bleu"]) <= tolerance for b in beams)

        kept = [f for f in formats if equal(f)]
        fastest = max(kept, key=lambda f: speed[f])
        print(f"within {tolerance} BLEU of fp32 in every beam: {', '.join(kept)}; the fastest of them: {fastest}")
    print(f"translate --precision auto here picks: {decoding_precision('cpu').precision}")


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
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16", "int8"], help="compare these formats")
    parser.add_argument("--ref", help="reference translations (one per line): score each output with sacreBLEU")
    args = parser.parse_args()
    configure()
    torch.set_num_threads(args.threads)
    lines = Path(args.source).read_text(encoding="utf-8").splitlines()
    references = Path(args.ref).read_text(encoding="utf-8").splitlines() if args.ref else None
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    formats = args.precisions or ["int8" if args.int8 else "fp32"]
    tagged = bool(args.precisions)  # a comparison names every file; the single-format run keeps its names
    for number_format in formats:
        results.update(decode(args, number_format, lines, references, out_dir, tagged))
    if args.precisions and len(formats) > 1 and "fp32" in formats:
        compare(results, formats, args.beams)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
