"""Decoding and evaluation steps of the Lightning module: validation, test and predict.

:class:`EvaluationSteps` holds what ``Seq2SeqLitModule`` does once a model exists: search with the
model's settings, teacher-forced and decoded metrics overall and per source-length bucket
(:class:`~seq2seq_attn.evaluation.Evaluation`), one ``val_history.jsonl`` line per validation, the test
results and translations of a run folder, and predictions in dataset order. Training, the checkpoint's
contents and the optimiser are in :mod:`seq2seq_attn.lit_module`.
"""

import time
from pathlib import Path
from typing import Optional

import pytorch_lightning as pl

from seq2seq_attn.architecture import ARCHITECTURE_KEYS
from seq2seq_attn.data.collate import Batch
from seq2seq_attn.data.datamodule import Seq2SeqDataModule
from seq2seq_attn.data.vocab import PAD_ID, Vocab
from seq2seq_attn.evaluation import Evaluation, all_gather
from seq2seq_attn.metrics import METRICS, format_table, metric_info, metric_items, sacrebleu_signature
from seq2seq_attn.results import TRANSLATIONS, VAL_HISTORY, append_jsonl, write_json, write_jsonl_gz, write_test_results
from seq2seq_attn.search import Hypotheses, SearchSettings, search


class EvaluationSteps(pl.LightningModule):
    """Validation, test and predict for a subclass that sets ``self.model`` (a network with the
    :class:`~seq2seq_attn.modules.seq2seq.Seq2Seq` interface), the vocabularies and the search and
    bucket hyperparameters (``beam_size``, ``alpha``, ``max_len_a``, ``max_len_b``, ``coverage_penalty``,
    ``val_decode_limit``, ``test_buckets``, ``attention_examples``)."""

    src_vocab: Optional[Vocab] = None
    trg_vocab: Optional[Vocab] = None

    def __init__(self) -> None:
        super().__init__()
        self._evaluation = Evaluation(None)
        self._predictions: list[tuple[int, str]] = []
        self._validation_started = time.monotonic()

    def fit_seconds(self) -> Optional[float]:
        """Seconds of training so far, for the learning curve; None where the subclass keeps no clock."""
        return None

    def datamodule(self) -> Optional[Seq2SeqDataModule]:
        """The trainer's data module when it is one of this package's (else None: plain dataloaders)."""
        datamodule = getattr(self.trainer, "datamodule", None)
        return datamodule if isinstance(datamodule, Seq2SeqDataModule) else None

    def decode(self, batch: Batch, beam_size: int = 1, alpha: Optional[float] = None) -> Hypotheses:
        """Search with the model's settings; ``alpha`` (the length penalty) None: ``hparams.alpha``."""
        hp = self.hparams
        alpha = hp.alpha if alpha is None else alpha
        settings = SearchSettings(beam_size, alpha, hp.max_len_a, hp.max_len_b, coverage_penalty=hp.coverage_penalty)
        return search(self.model, batch.src, batch.src_lengths, settings)

    # -- validation and test: overall and per source-length bucket ------------------
    def _start_evaluation(self, split: str) -> None:
        text = self.datamodule().text_source() if self.datamodule() is not None else None
        examples = self.hparams.attention_examples
        self._evaluation = Evaluation(self.trg_vocab, self.src_vocab, split, text, examples)

    def _evaluate(self, batch: Batch, decode: bool, beam_size: int) -> None:
        real = batch.trg_out != PAD_ID  # (B, T): the output layer skips the target padding, as in training
        out = self.model(batch.src, batch.src_lengths, batch.trg_in, select=real)  # teacher-forced logits (N, V)
        hyp = self.decode(batch, beam_size) if decode else None
        self._evaluation.add(batch, out.logits, out.weights, hyp, out.energies)

    def on_validation_epoch_start(self) -> None:
        self._validation_started = time.monotonic()
        self._start_evaluation("val")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        limit = self.hparams.val_decode_limit // self.trainer.world_size  # shared across DDP processes
        self._evaluate(batch, self._evaluation.decoded < limit, beam_size=1)

    def on_validation_epoch_end(self) -> None:
        self._evaluation.merge_ranks()  # every process now holds the whole split: same metrics everywhere
        metrics, buckets = self._evaluation.summary(self.hparams.test_buckets)
        for name, value in metric_items(metrics):
            info = metric_info(name)
            self.log(f"val/{name}", value, prog_bar=bool(info and info.progress_bar), sync_dist=True)
        headline = next((m for m in ("bleu", "exact_match") if m in metrics), None)
        for row in buckets if headline else []:  # how quality per length evolves (W&B draws these)
            if headline in row:
                self.log(f"val_{headline}_by_length/{row['bucket']}", row[headline], sync_dist=True)
        if not self.trainer.sanity_checking:
            self._write_validation_history(metrics, buckets)

    def _write_validation_history(self, overall: dict, buckets: list[dict]) -> None:
        """One line per validation in ``val_history.jsonl``: step, training seconds (validations included),
        the seconds of this validation (teacher-forced pass, greedy decoding, metrics), overall and per bucket."""
        folder = Path(self.trainer.log_dir or self.trainer.default_root_dir)  # a collective: every process asks
        if self.trainer.is_global_zero:
            record = {"step": self.global_step, "epoch": self.current_epoch, "seconds": self.fit_seconds()}
            record["validation_seconds"] = time.monotonic() - self._validation_started
            append_jsonl(folder / VAL_HISTORY, {**record, "overall": overall, "buckets": buckets})

    def on_test_epoch_start(self) -> None:
        self._start_evaluation("test")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, decode=True, beam_size=self.hparams.beam_size)

    def on_test_epoch_end(self) -> None:
        self._evaluation.merge_ranks()
        overall, buckets = self._evaluation.summary(self.hparams.test_buckets)
        for name, value in metric_items(overall):
            self.log(f"test/{name}", value, sync_dist=True)
        self.test_results = {"overall": overall, "buckets": buckets}
        folder = self.results_dir()  # on every process: it may ask trainer.log_dir, a collective
        if self.trainer.is_global_zero:
            meta = {k: self.hparams[k] for k in ARCHITECTURE_KEYS if k in self.hparams}
            meta.update(beam_size=self.hparams.beam_size, alpha=self.hparams.alpha)
            meta["train_max_length"] = self.datamodule().train_max_length if self.datamodule() else None
            if "bleu" in overall:
                meta["sacrebleu"] = sacrebleu_signature()
            path = write_test_results(folder, overall, buckets, meta)
            write_json(folder / "test_attention.json", self.attention_maps())
            if translations := self._evaluation.translations():  # real text: what the statistics need
                write_jsonl_gz(folder / TRANSLATIONS, translations)
            columns = [m.name for m in METRICS.values() if m.per_bucket and m.name in overall]
            print(f"\nTest results per source length (written to {path}):")
            print(format_table([{"bucket": "all", **overall}, *buckets], columns))

    def attention_maps(self) -> list[dict]:
        """The attention maps kept by the last validation or test pass (see :class:`Evaluation`)."""
        return self._evaluation.sorted_attention_maps()

    def results_dir(self) -> Path:
        """The run folder of the checkpoint being evaluated, else this run's log folder."""
        ckpt = self.trainer.ckpt_path
        if ckpt and Path(ckpt).parent.name == "checkpoints":
            return Path(ckpt).parent.parent
        return Path(self.trainer.log_dir or self.trainer.default_root_dir)

    # -- predict: translations in dataset order ---------------------------------
    def on_predict_epoch_start(self) -> None:
        self._predictions = []

    def predict_step(self, batch: Batch, batch_idx: int) -> list[str]:
        hyp = self.decode(batch, self.hparams.beam_size).to_lists()
        if self.trg_vocab is None:  # no vocabulary: the ids themselves
            lines = [" ".join(map(str, h)) for h in hyp]
        else:  # as text: a subword model's pieces joined back into words
            detokenize = self.datamodule().detokenize if self.datamodule() else " ".join
            lines = [self.trg_vocab.to_text(h, detokenize) for h in hyp]
        self._predictions.extend(zip(batch.index.tolist(), lines))
        return lines

    def on_predict_epoch_end(self) -> None:
        by_index = {i: line for part in all_gather(self._predictions) for i, line in part}  # DDP: each once
        lines = [by_index[i] for i in sorted(by_index)]
        path = self.results_dir() / "predictions.txt"  # on every process (see on_test_epoch_end)
        if self.trainer.is_global_zero:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            print(f"wrote {len(lines)} predictions to {path}")
