"""The tool commands beside LightningCLI's: ablate, cell, report, resume, translate, evaluate, data fetch."""

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Optional

from seq2seq_attn.errors import ConfigError


def ablate_command(argv: list[str]) -> None:
    from seq2seq_attn.ablation.runner import ablate

    parser = argparse.ArgumentParser(prog="seq2seq-attn ablate", description="Run a grid of experiments, resumably.")
    parser.add_argument("grid", help="grid file, e.g. experiments/ablations/toy_reverse.yaml")
    parser.add_argument("--out", help="run folder (default: $S2S_RUNS_ROOT/ablations/<grid name>, else runs/...)")
    parser.add_argument(
        "--publish",
        metavar="DIR",
        help="copy each finished cell's small files here as it lands; cells finished here are not run again",
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a setting for every cell beside the grid's fixed ones, e.g. trainer.accelerator=gpu",
    )
    parser.add_argument("--jobs", type=int, default=0, help="cells run in parallel (default: cores, at most 8)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OpenMP threads per cell (default: the cores shared among the cells running at once)",
    )
    parser.add_argument("--retry-failed", action="store_true", help="run cells that failed before again")
    parser.add_argument("--dry-run", action="store_true", help="list the cells that would run, run nothing")
    parser.add_argument("--emit-sweep", metavar="SWEEP.yaml", help="write the grid as a W&B sweep config, run nothing")
    args = parser.parse_args(argv)
    if args.jobs < 0:
        raise ConfigError(f"--jobs must be >= 0, got {args.jobs}")
    if args.threads < 0:
        raise ConfigError(f"--threads must be >= 0 (0: share the cores among the cells), got {args.threads}")
    if args.emit_sweep:
        from seq2seq_attn.ablation.grid import Grid
        from seq2seq_attn.ablation.runner import default_out
        from seq2seq_attn.ablation.sweep import emit_sweep

        grid = Grid.load(args.grid)
        emit_sweep(grid, args.emit_sweep, Path(args.out) if args.out else default_out(grid))
        return
    settings = _settings(args.set)
    ablate(
        args.grid, args.out, args.jobs, args.retry_failed, args.dry_run, args.publish, settings, args.threads or None
    )


def _settings(pairs: list[str]) -> dict:
    """``["trainer.accelerator=gpu", "trainer.devices=1"]`` -> their keys and YAML-read values."""
    import yaml

    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set takes KEY=VALUE, e.g. --set trainer.accelerator=gpu, not {pair!r}")
        settings[key.strip()] = yaml.safe_load(value)
    return settings


def cell_command(argv: list[str]) -> None:
    from seq2seq_attn.ablation.cell import run_and_record
    from seq2seq_attn.ablation.grid import Grid
    from seq2seq_attn.ablation.runner import cell_args, cell_dir, default_out
    from seq2seq_attn.ablation.sweep import cell_from_args

    parser = argparse.ArgumentParser(
        prog="seq2seq-attn cell",
        description="Fit and test one cell of a grid, with W&B on (what `wandb agent` runs for --emit-sweep).",
    )
    parser.add_argument("grid", help="the grid file the sweep was made from")
    parser.add_argument("--out", help="ablation folder (default: runs/ablations/<grid name>)")
    args, overrides = parser.parse_known_args(argv)
    grid = Grid.load(args.grid)
    cell, reason = cell_from_args(grid, overrides)
    if cell is None:
        print(f"skipping {' '.join(overrides)}: {reason}")
        return
    out = Path(args.out) if args.out else default_out(grid)
    code = run_and_record(cell_dir(out, cell), [*cell_args(grid, cell), "--wandb.enabled", "true"])
    if code:
        sys.exit(code)


def resume_command(argv: list[str]) -> None:
    from seq2seq_attn.checkpointing import resume_args
    from seq2seq_attn.lightning_cli import run_cli

    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: seq2seq-attn resume RUN_DIR [fit overrides ...]\n\n"
            "Continue a stopped or killed run from RUN_DIR/checkpoints/last.ckpt with the run's own\n"
            "config.yaml, writing into the same folder. Overrides such as --trainer.max_epochs 20 extend it."
        )
        return
    run_cli(resume_args(argv[0]) + argv[1:])


def report_command(argv: list[str]) -> None:
    from seq2seq_attn.ablation.report import collect_runs, write_report, write_results_csv

    parser = argparse.ArgumentParser(
        prog="seq2seq-attn report",
        description="Redraw an ablation's report, or (--runs) build one from tested run folders, without W&B.",
    )
    parser.add_argument("dir", help="an ablation output folder (with --runs: where the report goes)")
    parser.add_argument("--runs", metavar="ROOT", help="collect every run under ROOT that has a test_results.json")
    parser.add_argument(
        "--metric", help="metric of the main table and plot (default: the grid's `metric:`, else exact_match)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing: rebuild the report in a scratch folder and fail if a committed file no longer matches",
    )
    args = parser.parse_args(argv)
    if args.check:
        from seq2seq_attn.ablation.check import report_drift

        if not (Path(args.dir) / "cells").is_dir():
            raise ConfigError(f"--check needs the cells the report is drawn from: no {args.dir}/cells")
        drift = report_drift(Path(args.dir))
        if drift:
            raise ConfigError(
                f"{args.dir}: {'; '.join(drift)}: run `seq2seq-attn report {args.dir}` and commit what it writes"
            )
        print(f"{args.dir}: the committed report is the one its cells give")
        return
    if args.runs:
        if not Path(args.runs).is_dir():
            raise ConfigError(f"--runs {args.runs}: not a folder; pass the folder your runs are in, e.g. runs")
        found = collect_runs(Path(args.runs), Path(args.dir))
        if not found:
            raise ConfigError(f"no tested runs under {args.runs}: run `seq2seq-attn test --ckpt_path ...` first")
        print(f"collected {found} tested run(s) from {args.runs} into {args.dir}")
        write_results_csv(Path(args.dir))
    elif any((Path(args.dir) / "cells").glob("*/result.json")):
        write_results_csv(Path(args.dir))  # from the cells there now: ones added since the grid ran count too
    elif not (Path(args.dir) / "results.csv").is_file():
        raise ConfigError(f"no results.csv in {args.dir}: pass the folder an ablation wrote (its --out), or use --runs")
    write_report(Path(args.dir), args.metric)


def _search_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a checkpoint, e.g. runs/NAME/version_0/checkpoints/best.ckpt")
    parser.add_argument("--beam", type=int, default=5, help="beam size (1 = greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of Wu et al. (2016)")
    parser.add_argument("--max-input-tokens", type=int, default=400, help="longer inputs are cut, with a warning")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when present)")
    parser.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16", "int8"),
        default="auto",
        help="number format of decoding; auto: fp32 on CUDA, on CPU the fastest of the three (a GEMM probe, "
        "cached per machine; int8 weights decoded 1.7-1.9x faster than fp32 at equal BLEU on Multi30k)",
    )
    parser.add_argument("--int8", action="store_true", help="the same as --precision int8")


def _check_search(args) -> None:
    if args.beam < 1 or args.alpha < 0 or args.max_input_tokens < 1:
        raise ConfigError(
            f"need --beam >= 1, --alpha >= 0, --max-input-tokens >= 1; got {args.beam}, "
            f"{args.alpha}, {args.max_input_tokens}"
        )


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is visible here; use --device cpu")
    return name


def _read_text(path: Optional[str]) -> list[str]:
    from seq2seq_attn.data.corpora import read_lines

    if path is None or path == "-":
        data = sys.stdin.buffer.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            line = data[: err.start].count(b"\n") + 1
            raise ConfigError(f"standard input: line {line} is not valid UTF-8: re-encode it as UTF-8") from err
        return text.splitlines()
    if not Path(path).is_file():
        raise ConfigError(f"input file not found: {path}")
    return read_lines(Path(path))


def _translate(args, lines: list[str]) -> list[str]:
    """One detokenised output per input line; an empty line gives an empty output."""
    from seq2seq_attn.inference import load_model, text_codec, translate_tokens
    from seq2seq_attn.precision import bf16_weights, decoding_precision, describe
    from seq2seq_attn.quantize import int8_copy

    if args.int8:
        args.precision = "int8"
    device = "cpu" if args.precision == "int8" and args.device == "auto" else _device(args.device)  # int8: CPU
    module = load_model(args.ckpt, device)
    if args.precision == "auto":
        choice = decoding_precision(device)
        print(describe(choice), file=sys.stderr)
        args.precision = choice.precision
    if args.precision == "int8":
        module.model = int8_copy(module.model)
    codec = text_codec(module)
    tokens = [codec.tokenize(line) if line.strip() else [] for line in lines]
    cut = sum(len(t) > args.max_input_tokens for t in tokens)
    if cut:
        print(
            f"warning: {cut} input line(s) longer than {args.max_input_tokens} tokens were cut to that length",
            file=sys.stderr,
        )
    # bf16: the weights cast once for the whole run (not once per decoder step), autocast for the rest
    with bf16_weights(module.model) if args.precision == "bf16" else contextlib.nullcontext():
        results = translate_tokens(
            module, [t[: args.max_input_tokens] for t in tokens], args.beam, args.alpha, attention=False
        )
    return [codec.detokenize(r.tokens) for r in results]


def translate_command(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="seq2seq-attn translate", description="Translate one sentence per line; line counts always match."
    )
    _search_args(parser)
    parser.add_argument("--input", help="source file (default: standard input)")
    parser.add_argument("--output", help="output file (default: standard output)")
    args = parser.parse_args(argv)
    _check_search(args)
    outputs = _translate(args, _read_text(args.input))
    text = "".join(f"{line}\n" for line in outputs)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def evaluate_command(argv: list[str]) -> None:
    from seq2seq_attn.metrics import DEFAULT_BUCKETS, sacrebleu_signature, text_score_table
    from seq2seq_attn.results import write_json

    parser = argparse.ArgumentParser(
        prog="seq2seq-attn evaluate",
        description="BLEU, chrF and the output's length over the reference's, overall and per length.",
    )
    _search_args(parser)
    parser.add_argument("--src", required=True, help="source file (plain or .gz)")
    parser.add_argument("--ref", required=True, help="reference file, line-parallel to --src")
    parser.add_argument(
        "--buckets",
        default=",".join(map(str, DEFAULT_BUCKETS)),
        help="upper edges of the source-length buckets, in words",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    _check_search(args)
    try:
        edges = [int(x) for x in args.buckets.split(",") if x.strip()]
    except ValueError as err:
        raise ConfigError(f"--buckets must be comma-separated integers, got {args.buckets!r}") from err
    if edges != sorted(set(edges)) or any(e < 1 for e in edges):
        raise ConfigError(f"--buckets must be increasing positive integers, got {args.buckets!r}")
    src, ref = _read_text(args.src), _read_text(args.ref)
    if len(src) != len(ref):
        raise ConfigError(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}: they must be line-parallel")
    hyps = _translate(args, src)
    scores, by_bucket = text_score_table(hyps, ref, [len(s.split()) for s in src], edges, length_ratio=True)
    overall = {"count": len(src), **scores}
    buckets = [{"bucket": label, **scores} for label, scores in by_bucket.items()]
    print(
        f"BLEU {overall.get('bleu', 0):.2f}  chrF {overall.get('chrf', 0):.2f}  length "
        f"{overall.get('length_ratio', 0):.2f} of the reference's ({len(src)} sentences; {sacrebleu_signature()})"
    )
    print(f"{'bucket':>8} {'count':>6} {'BLEU':>7} {'chrF':>7} {'length':>7}")
    for row in buckets:
        print(f"{row['bucket']:>8} {int(row['count']):>6} {row['bleu']:>7.2f} {row['chrf']:>7.2f} "
              f"{row['length_ratio']:>7.2f}")  # fmt: skip
    if args.out:
        write_json(
            args.out,
            {
                "overall": overall,
                "buckets": buckets,
                "signature": sacrebleu_signature(),
                "beam": args.beam,
                "alpha": args.alpha,
                "precision": args.precision,
                "ckpt": args.ckpt,
            },
        )
        print(f"wrote {args.out}")


def data_command(argv: list[str]) -> None:
    from seq2seq_attn.data.fetch import BUILT, SOURCES, fetch

    parser = argparse.ArgumentParser(prog="seq2seq-attn data", description="Corpora on disk.")
    sub = parser.add_subparsers(dest="action", required=True)
    get = sub.add_parser("fetch", help="download a corpus into the data root, verifying sha256 sums (or build it)")
    get.add_argument("corpus", choices=sorted([*SOURCES, *BUILT]))
    get.add_argument("--root", help="data root (default: $S2S_DATA_ROOT or ~/.cache/seq2seq_attn/data)")
    get.add_argument("--base-url", help="download from this mirror instead")
    get.add_argument("--modules", help="bible_en_es: folder of SWORD modules (default: /usr/share/sword)")
    args = parser.parse_args(argv)
    folder = fetch(args.corpus, args.root, args.base_url, modules=args.modules)
    print(f"{args.corpus} is in {folder}")


def precision_command(argv: list[str]) -> None:
    import torch

    from seq2seq_attn.precision import cache_path, decoding_precision, describe, training_precision

    parser = argparse.ArgumentParser(
        prog="seq2seq-attn precision",
        description="The GEMM rates of this machine and what `precision: auto` picks for training and decoding.",
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="as many as training uses")
    parser.add_argument("--remeasure", action="store_true", help="probe again (e.g. after a busy machine's probe)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}: e.g. --threads {torch.get_num_threads()}")
    torch.set_num_threads(args.threads)
    if args.remeasure:
        from seq2seq_attn.precision import forget_machine

        forget_machine()
    training, decoding = training_precision("cpu"), decoding_precision("cpu")
    rates = ", ".join(f"{name} {rate:.0f}" for name, rate in (training.rates or {}).items())
    source = "cached" if training.cached else "measured now"
    print(f"{training.machine}\nGEMM GFLOP/s: {rates} ({source}: {cache_path()})")
    print(f"training: {describe(training)}\ndecoding: {describe(decoding)}")


TOOL_COMMANDS = {
    "ablate": ablate_command,
    "cell": cell_command,
    "report": report_command,
    "resume": resume_command,
    "translate": translate_command,
    "evaluate": evaluate_command,
    "data": data_command,
    "precision": precision_command,
}
