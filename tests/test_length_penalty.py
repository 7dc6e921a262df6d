"""The beam's length penalty tuned on dev after a test, and the output length logged at every validation."""

import gzip
import json
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from seq2seq_attn.lightning_cli import make_cli

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
BIBLE = ["--config", str(EXPERIMENTS / "base.yaml"), "--config", str(EXPERIMENTS / "bible_en_es" / "base.yaml")]
TINY = ["--trainer.logger", "false", "--trainer.max_steps", "12", "--trainer.val_check_interval", "6",
        "--trainer.check_val_every_n_epoch", "null", "--trainer.enable_progress_bar", "false",
        "--data.init_args.vocab_size", "300", "--data.init_args.batch_size", "32", "--model.emb_size", "16",
        "--model.hidden_size", "16", "--model.dec_hidden_size", "16", "--model.beam_size", "2",
        "--model.max_len_b", "4", "--model.lr", "0.01", "--seed_everything", "3"]  # fmt: skip


def fit_and_test(tmp_path: Path, alphas: list[float]):
    args = [
        *BIBLE,
        *TINY,
        "--trainer.default_root_dir",
        str(tmp_path),
        "--length_penalty_search.alphas",
        json.dumps(alphas),
    ]
    cli = make_cli(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    best = cli.trainer.checkpoint_callback.best_model_path
    cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=best)
    return cli, Path(best).parent.parent


def test_every_validation_logs_the_outputs_length_over_the_references(tmp_path):
    cli, run = fit_and_test(tmp_path, [])
    history = [json.loads(line) for line in (run / "val_history.jsonl").open()]
    assert [h["step"] for h in history] == [6, 12]
    for h in history:
        assert h["overall"]["length_ratio"] > 0 and all(b["length_ratio"] > 0 for b in h["buckets"])
    assert not (run / "length_penalty.json").exists()  # no alphas: no search
    # the test's ratio is sacreBLEU's hyp_len / ref_len of the saved translations
    rows = [json.loads(line) for line in gzip.open(run / "test_translations.jsonl.gz", "rt")]
    score = BLEU().corpus_score([r["hyp"] for r in rows], [[r["ref"] for r in rows]])
    tested = json.loads((run / "test_results.json").read_text())["overall"]
    assert tested["length_ratio"] == pytest.approx(score.sys_len / score.ref_len)


def test_the_protocols_alpha_alone_reproduces_the_tests_own_scores(tmp_path):
    cli, run = fit_and_test(tmp_path, [cli_alpha := 0.6])
    record = json.loads((run / "length_penalty.json").read_text())
    tested = json.loads((run / "test_results.json").read_text())
    assert record["alpha"] == cli_alpha == tested["meta"]["alpha"] and record["beam_size"] == 2
    # the search's own decoding loop gives what test_step gave: the same translations, the same scores
    for key in ("bleu", "chrf", "length_ratio"):
        assert record["test"]["overall"][key] == tested["overall"][key]
    by_bucket = {b["bucket"]: b for b in tested["buckets"]}
    assert all(b["bleu"] == by_bucket[b["bucket"]]["bleu"] for b in record["test"]["buckets"])


def test_the_alpha_with_the_best_dev_bleu_is_chosen_and_tested(tmp_path):
    cli, run = fit_and_test(tmp_path, [2.0, 0.0, 1.0])
    record = json.loads((run / "length_penalty.json").read_text())
    dev = record["dev"]
    assert [d["alpha"] for d in dev] == [0.0, 1.0, 2.0]
    assert record["alpha"] == max(dev, key=lambda d: d["bleu"])["alpha"]
    assert record["test"]["overall"]["count"] == json.loads((run / "test_results.json").read_text())["overall"]["count"]
    assert all(d["count"] == dev[0]["count"] > 0 and d["length_ratio"] > 0 for d in dev)


def test_a_negative_alpha_is_a_one_line_config_error():
    from seq2seq_attn.errors import ConfigError

    with pytest.raises(ConfigError, match="length_penalty_search.alphas"):
        make_cli([*BIBLE, "--length_penalty_search.alphas", "[-1.0]"], run=False)
