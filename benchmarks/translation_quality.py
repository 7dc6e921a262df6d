"""Translation quality within a wall-clock training budget on CPU.

    python benchmarks/translation_quality.py [--minutes 30] [--threads 2] [--out runs/quality]

1. Multi30k de->en, the additive-attention GRU (experiments/multi30k_de_en/), trained for
   --minutes of wall clock; prints test_2016_flickr sacreBLEU and chrF (beam 5). ``--models
   bahdanau_additive transformer`` trains each model of experiments/multi30k_de_en/ named there
   for the same budget, one after the other, and prints them side by side. ``--precision
   bf16-mixed`` trains in bf16 (evaluation stays fp32); ``--beams 1 5`` also prints greedy BLEU.
2. With --bible-minutes > 0: the same model and the `none` baseline on bible_en_es, each
   trained that long, with BLEU per source-length bucket on dev.
Reads the corpora from $S2S_DATA_ROOT (default ../shared/data beside the repository).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("S2S_DATA_ROOT", str(ROOT.parent / "shared" / "data"))
DATA = Path(os.environ["S2S_DATA_ROOT"])


def run(args: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "seq2seq_attn.cli", *args], check=True, env=env)


def train_and_evaluate(
    name: str,
    configs: list[str],
    minutes: float,
    src: Path,
    ref: Path,
    out: Path,
    threads: int,
    buckets: str,
    precision: str = "32-true",
    beams: tuple[int, ...] = (5,),
) -> dict:
    """Train for ``minutes`` of wall clock in ``precision``, then evaluate in fp32 with each beam size.

    Returns the largest beam's evaluation, with ``bleu_by_beam`` and ``train_seconds`` added."""
    folder = out / name
    budget = time.strftime("00:%H:%M:%S", time.gmtime(minutes * 60))
    start = time.time()
    run(
        [
            "fit",
            *[a for c in configs for a in ("--config", str(ROOT / c))],
            "--trainer.max_time",
            budget,
            "--trainer.max_epochs",
            "100",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.default_root_dir",
            str(folder),
            "--trainer.logger",
            "false",
            "--trainer.precision",
            precision,
        ],
        threads,
    )
    trained = time.time() - start
    ckpt = folder / "checkpoints" / "best.ckpt"
    results = {}
    for beam in beams:
        target = folder / f"evaluation_beam{beam}.json"
        run(
            ["evaluate", "--ckpt", str(ckpt), "--src", str(src), "--ref", str(ref), "--beam", str(beam)]
            + ["--precision", "fp32", "--alpha", "0.6", "--buckets", buckets, "--out", str(target)],
            threads,
        )
        results[beam] = json.loads(target.read_text())
    result = results[max(beams)]
    result["bleu_by_beam"] = {beam: r["overall"]["bleu"] for beam, r in results.items()}
    result["train_seconds"] = round(trained)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="Multi30k training budget (wall clock)")
    parser.add_argument("--bible-minutes", type=float, default=0.0, help="per-model budget on bible_en_es (0: skip)")
    parser.add_argument(
        "--models", nargs="+", default=["bahdanau_additive"], help="model files of experiments/multi30k_de_en/"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--precision", default="32-true", help="trainer precision: 32-true, bf16-mixed or auto")
    parser.add_argument("--beams", type=int, nargs="+", default=[5], help="evaluate with each beam size (1: greedy)")
    parser.add_argument("--out", default="runs/quality")
    args = parser.parse_args()
    out = Path(args.out)
    m30k = ["experiments/base.yaml", "experiments/multi30k_de_en/base.yaml"]
    print()
    for model in args.models:
        suffix = "" if args.precision == "32-true" else f"_{args.precision}"
        result = train_and_evaluate(
            f"multi30k_{model}{suffix}",
            [*m30k, f"experiments/multi30k_de_en/{model}.yaml"],
            args.minutes,
            DATA / "multi30k" / "test_2016_flickr.de.gz",
            DATA / "multi30k" / "test_2016_flickr.en.gz",
            out,
            args.threads,
            "10,15,20,25,30",
            args.precision,
            tuple(sorted(set(args.beams))),
        )
        buckets = ", ".join(f"{b['bucket']}: {b['bleu']:.1f}" for b in result["buckets"])
        by_beam = ", ".join(f"beam {k}: {v:.2f}" for k, v in result["bleu_by_beam"].items())
        print(
            f"Multi30k de->en test_2016_flickr, {model}, {args.precision}, {result['train_seconds']} s of training: "
            f"BLEU {result['overall']['bleu']:.2f}, chrF {result['overall']['chrf']:.2f} (beam {max(args.beams)}; "
            f"{result['signature']}); BLEU {by_beam}; per bucket {buckets}",
            flush=True,
        )
    if args.bible_minutes > 0:
        bible = ["experiments/base.yaml", "experiments/bible_en_es/base.yaml"]
        rows = {}
        for model in ("bahdanau_additive", "none_none"):
            rows[model] = train_and_evaluate(
                f"bible_{model}",
                [*bible, f"experiments/bible_en_es/{model}.yaml"],
                args.bible_minutes,
                DATA / "bible_en_es" / "dev.en.gz",
                DATA / "bible_en_es" / "dev.es.gz",
                out,
                args.threads,
                "10,20,30,40,50,60",
            )
        print("\nbible_en_es dev BLEU per source length (words):")
        print(f"{'bucket':>8} {'count':>6} " + " ".join(f"{m:>18}" for m in rows))
        labels = [b["bucket"] for b in rows["bahdanau_additive"]["buckets"]]
        for i, label in enumerate(labels):
            count = int(rows["bahdanau_additive"]["buckets"][i]["count"])
            print(f"{label:>8} {count:>6} " + " ".join(f"{r['buckets'][i]['bleu']:>18.2f}" for r in rows.values()))


if __name__ == "__main__":
    main()
