"""A tiny Multi30k model through the CLI: test with BLEU per bucket, translate, evaluate, predict, int8."""

import json
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from seq2seq_attn.cli import main
from seq2seq_attn.data.corpora import read_lines
from seq2seq_attn.data.tokenizer import TextTokenizer
from seq2seq_attn.results import TRANSLATIONS, read_jsonl_gz

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "corpora"


# a tiny Multi30k model: the shipped configs with small sizes and data slices
M30K = [
    "--config", str(ROOT / "experiments" / "base.yaml"),
    "--config", str(ROOT / "experiments" / "multi30k_de_en" / "base.yaml"),
    *"--trainer.logger false --trainer.enable_progress_bar false --model.emb_size 16 --model.hidden_size 16".split(),
    *"--model.dec_hidden_size 32 --data.init_args.max_train 600 --data.init_args.max_eval 40".split(),
    *"--model.beam_size 2".split(),
]  # fmt: skip


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    """A tiny Multi30k model trained for a few steps through the CLI."""
    out = tmp_path_factory.mktemp("m30k")
    main(["fit", *M30K, "--trainer.default_root_dir", str(out), "--trainer.max_steps", "30",
          "--model.val_decode_limit", "16"])  # fmt: skip
    return out


def test_fit_and_test_report_bleu_per_bucket(trained_checkpoint, capsys):
    ckpt = trained_checkpoint / "checkpoints" / "last.ckpt"
    main(["test", *M30K, "--trainer.default_root_dir", str(trained_checkpoint), "--ckpt_path", str(ckpt)])
    saved = TextTokenizer.from_json((trained_checkpoint / "tokenizer.src.json").read_text(encoding="utf-8"))
    assert saved.tokenize("ein Mann.") == ["▁ein", "▁Mann", "."]
    results = json.loads((trained_checkpoint / "test_results.json").read_text())
    assert {"bleu", "chrf"} <= set(results["overall"]) and "BLEU" in results["meta"]["sacrebleu"]
    assert all("bleu" in b for b in results["buckets"])
    assert sum(b["count"] for b in results["buckets"]) == 40
    rows = read_jsonl_gz(trained_checkpoint / TRANSLATIONS)  # what bootstrap statistics are computed from
    refs = read_lines(FIXTURES / "multi30k" / "test_2016_flickr.en.gz")
    assert [r["index"] for r in rows] == list(range(40)) and [r["ref"] for r in rows] == refs[:40]
    assert all(
        r["src_len"] == len(s.split())
        for r, s in zip(rows, read_lines(FIXTURES / "multi30k" / "test_2016_flickr.de.gz"))
    )


def test_translate_keeps_line_counts_and_handles_long_lines(trained_checkpoint, tmp_path, capsys, monkeypatch):
    ckpt = str(trained_checkpoint / "checkpoints" / "last.ckpt")
    source = tmp_path / "in.de"
    source.write_text("ein mann geht .\n\n" + "sehr " * 600 + "lang .\nzwei hunde .\n", encoding="utf-8")
    main(["translate", "--ckpt", ckpt, "--beam", "2", "--input", str(source), "--output", str(tmp_path / "out")])
    lines = (tmp_path / "out").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 5 and lines[-1] == "" and lines[1] == ""
    assert "were cut to that length" in capsys.readouterr().err


def test_evaluate_prints_and_writes_buckets(trained_checkpoint, tmp_path, capsys):
    ckpt = str(trained_checkpoint / "checkpoints" / "last.ckpt")
    src, ref = FIXTURES / "multi30k" / "val.de.gz", FIXTURES / "multi30k" / "val.en.gz"
    short_src, short_ref = tmp_path / "s.de", tmp_path / "r.en"
    short_src.write_text("\n".join(read_lines(src)[:25]) + "\n", encoding="utf-8")
    short_ref.write_text("\n".join(read_lines(ref)[:25]) + "\n", encoding="utf-8")
    main(
        [
            "evaluate",
            "--ckpt",
            ckpt,
            "--src",
            str(short_src),
            "--ref",
            str(short_ref),
            "--beam",
            "1",
            "--buckets",
            "8,12",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "nrefs:1" in printed
    result = json.loads((tmp_path / "r.json").read_text())
    assert [b["bucket"] for b in result["buckets"]][0] == "1-8"
    assert sum(b["count"] for b in result["buckets"]) == 25
    # the output's length over the reference's: sacreBLEU's own ratio of the same greedy translations
    main(["translate", "--ckpt", ckpt, "--beam", "1", "--input", str(short_src), "--output", str(tmp_path / "h")])
    hyps = (tmp_path / "h").read_text(encoding="utf-8").splitlines()
    refs, words = read_lines(short_ref), [len(s.split()) for s in read_lines(short_src)]
    assert result["overall"]["length_ratio"] == pytest.approx(BLEU().corpus_score(hyps, [refs]).ratio, abs=1e-12)
    assert f"length {result['overall']['length_ratio']:.2f} of the reference's" in printed
    for bucket, (lo, hi) in zip(result["buckets"], [(1, 8), (9, 12), (13, 10**6)]):
        members = [i for i, n in enumerate(words) if lo <= n <= hi]
        sacre = BLEU().corpus_score([hyps[i] for i in members], [[refs[i] for i in members]])
        assert bucket["length_ratio"] == pytest.approx(sacre.ratio, abs=1e-12)
    short_ref.write_text("one line\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["evaluate", "--ckpt", ckpt, "--src", str(short_src), "--ref", str(short_ref)])
    assert "must be line-parallel" in capsys.readouterr().err


def test_translate_int8_and_bf16_agree_with_fp32_and_auto_takes_the_fastest(
    trained_checkpoint, tmp_path, capsys, monkeypatch
):
    from seq2seq_attn import precision

    ckpt = str(trained_checkpoint / "checkpoints" / "last.ckpt")
    source = tmp_path / "in.de"
    source.write_text("\n".join(read_lines(FIXTURES / "multi30k" / "val.de.gz")[:40]) + "\n", encoding="utf-8")
    monkeypatch.setenv("S2S_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "probe", lambda: {"fp32": 300.0, "bf16": 160.0, "int8": 700.0})
    outputs = {}
    runs = (("fp32", ["--precision", "fp32"]), ("int8", ["--int8"]), ("bf16", ["--precision", "bf16"]), ("auto", []))
    for name, flags in runs:
        out = tmp_path / f"{name}.en"
        main(["translate", "--ckpt", ckpt, "--beam", "2", "--input", str(source), "--output", str(out), *flags])
        outputs[name] = out.read_text(encoding="utf-8").splitlines()
    assert all(len(lines) == 40 for lines in outputs.values())
    for name in ("int8", "bf16"):  # rounding flips a few near-ties, not the translations
        assert sum(a == b for a, b in zip(outputs[name], outputs["fp32"])) >= 30, name
    assert outputs["auto"] == outputs["int8"]  # int8 has the fastest probe rate here
    assert "precision auto -> int8" in capsys.readouterr().err


def test_predict_writes_detokenised_text(trained_checkpoint):
    """Predictions are text as a reader sees it: the tokenizer's word markers (▁) joined back, not printed."""
    ckpt = trained_checkpoint / "checkpoints" / "last.ckpt"
    main(["predict", *M30K, "--trainer.default_root_dir", str(trained_checkpoint), "--ckpt_path", str(ckpt)])
    lines = (trained_checkpoint / "predictions.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 40 and any(lines)
    assert not any("▁" in line for line in lines), lines[:3]
