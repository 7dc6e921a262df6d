"""Seq2SeqLitModule: loss, decoding metrics, per-length evaluation, logging.

The model parts (``seq2seq_attn/modules``) take tensors; this module, the training
loss (:mod:`seq2seq_attn.loss`) and the evaluation records
(:mod:`seq2seq_attn.evaluation`) read them out of a
:class:`~seq2seq_attn.data.collate.Batch`.
"""

import time
from pathlib import Path
from typing import Any, Literal, Optional

import pytorch_lightning as pl
import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from pytorch_lightning.callbacks import EarlyStopping

from seq2seq_attn.data.collate import Batch
from seq2seq_attn.data.datamodule import Seq2SeqDataModule
from seq2seq_attn.data.vocab import PAD_ID, Vocab
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.evaluation import Evaluation, all_gather
from seq2seq_attn.loss import token_loss
from seq2seq_attn.metrics import (
    DEFAULT_BUCKETS,
    METRICS,
    format_table,
    metric_info,
    metric_items,
    sacrebleu_signature,
)
from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.modules.transformer import build_transformer
from seq2seq_attn.optim import adam, lr_factor
from seq2seq_attn.results import (
    TRANSLATIONS,
    VAL_HISTORY,
    append_jsonl,
    environment_info,
    keep_history_until,
    write_json,
    write_jsonl_gz,
    write_test_results,
)
from seq2seq_attn.search import Hypotheses, SearchSettings, search


@torch.no_grad()
def init_uniform(model: torch.nn.Module, bound: float) -> None:
    """Every parameter uniform in ``±bound``; embedding rows of the padding token stay zero."""
    for parameter in model.parameters():
        parameter.uniform_(-bound, bound)
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
            module.weight[module.padding_idx].zero_()


# hyperparameters that change the network's shape or function: a checkpoint must match them; the model is
# built from them
ARCHITECTURE_KEYS = (
    "src_vocab_size",
    "trg_vocab_size",
    "attention",
    "flow",
    "input_feed",
    "cell",
    "emb_size",
    "hidden_size",
    "dec_hidden_size",
    "num_layers",
    "bidirectional",
    "attn_size",
    "alignment",
    "window",
    "heads",
    "coverage",
    "max_source_length",
    "score_scale",
    "arch",
    "ffn_size",
    "positions",
    "norm",
    "tie_embeddings",
)
# the Transformer's own shape, beside the shared emb_size (its model size), num_layers, heads, vocab sizes
TRANSFORMER_KEYS = ("ffn_size", "positions", "norm", "tie_embeddings")


def build_model(hp: dict) -> torch.nn.Module:
    """The network the hyperparameters describe: an RNN encoder-decoder or a Transformer."""
    if hp["arch"] == "transformer":
        given = {k: hp[k] for k in ("flow", "attention") if hp[k] is not None}
        if given:
            raise ConfigError(
                f"arch 'transformer' takes no {' or '.join(given)} (got {given}): set model.flow and "
                "model.attention to null; its attention is multi-head, set by model.heads"
            )
        sizes = {k: hp[k] for k in TRANSFORMER_KEYS}
        return build_transformer(hp["src_vocab_size"], hp["trg_vocab_size"], size=hp["emb_size"], heads=hp["heads"],
                                 layers=hp["num_layers"], dropout=hp["dropout"], max_positions=hp["max_source_length"],
                                 pad_id=PAD_ID, **sizes)  # fmt: skip
    if hp["arch"] != "rnn":
        raise ConfigError(f"unknown arch {hp['arch']!r}: choose one of ['rnn', 'transformer']")
    if hp["flow"] is None or hp["attention"] is None:
        raise ConfigError("arch 'rnn' needs a flow and an attention (e.g. flow bahdanau, attention additive)")
    keys = [k for k in ARCHITECTURE_KEYS if k not in ("arch", *TRANSFORMER_KEYS)]
    return build_seq2seq(**{k: hp[k] for k in keys}, dropout=hp["dropout"], pad_id=PAD_ID)


def check_same_function(saved: dict) -> None:
    """One line for a checkpoint whose weights this code would read with another function than the one they
    were trained with (a silent change of what the model computes). Args: its saved hyperparameters."""
    # local-p's centre became (S_x - 1) sigmoid(.) (it could fall one past the last word) in the same change
    # that added score_scale, so a local-p checkpoint without score_scale was trained with the old centre
    if saved.get("alignment") == "local-p" and "score_scale" not in saved:
        raise ConfigError(
            "checkpoint has local-p attention trained when its centre p_t could reach one past the last word; "
            "p_t is now bounded by S - 1, which moves the window it was trained with: train the model again"
        )


class Seq2SeqLitModule(pl.LightningModule):
    """An attentional (or bottleneck) RNN encoder-decoder trained with cross-entropy.

    Args:
        src_vocab_size, trg_vocab_size: linked from the data module by the CLI.
        attention: a scorer name (``additive``, ``general``, ``dot``, ``concat``,
            ``scaled_dot``) or ``none`` for the bottleneck baseline.
        flow: ``bahdanau`` (attend, then update), ``luong`` (update, then attend)
            or ``none`` (the baseline; needs ``attention: none``).
        input_feed: Luong's input feeding; ignored by the other flows.
        hidden_size: encoder size per direction; dec_hidden_size defaults to H.
        val_decode_limit: examples greedily decoded per validation epoch.
        test_buckets: upper edges of the source-length buckets in test results.
        attention_examples: test examples (the first N of the split) whose
            attention maps are saved to ``test_attention.json`` for heatmaps.
        beam_size, alpha: search used by ``test`` and ``predict`` (1 = greedy).
        max_len_a, max_len_b: outputs are capped at ``a * |src| + b`` tokens.
        alignment: where attention may look: ``global``, ``local-m`` or ``local-p`` (Luong 2015, Sec. 3.2),
            in a window of ``±window`` source positions.
        heads: multi-head attention for the multiplicative scorers (1 = the plain scorer); every head's
            energy is divided by sqrt(d_h).
        score_scale: ``none`` (Luong et al.'s energies as written) or ``sqrt_d`` (the ``dot`` and ``general``
            energies divided by sqrt(D), as Vaswani et al.'s dot product is).
        coverage: the attention summed so far enters the additive/concat energy (Tu 2016, See 2017);
            ``coverage_loss`` (λ) adds See et al.'s coverage loss to training, from the update that is
            ``coverage_loss_from`` of the way through ``trainer.max_steps`` (0: from the first; See et al.
            trained without it and added it for a short final phase: e.g. 0.8), ``coverage_penalty`` (β)
            Wu et al.'s coverage penalty to beam search.
        max_source_length: source positions the ``location`` scorer has weights for (and a Transformer's
            learned positions).
        arch: ``rnn`` (the encoder-decoders above) or ``transformer`` (Vaswani et al. 2017: ``emb_size`` is
            its model size, ``num_layers`` its layers per side, ``heads`` its heads; ``ffn_size``,
            ``positions`` sinusoidal/learned (absolute) or rotary (relative, Su et al. 2021), ``norm``
            pre/post, ``tie_embeddings``; no flow or attention).
        scheduler, warmup_steps: ``cosine`` or ``inverse_sqrt`` after a linear warm-up (``plateau``: halve
            the lr when val/loss stalls).
        param_init: if > 0, every parameter starts uniform in ``±param_init``
            (OpenNMT-py's ``-param_init``); 0 keeps PyTorch's initialisations.
    """

    def __init__(
        self,
        src_vocab_size: PositiveInt = 24,
        trg_vocab_size: PositiveInt = 24,
        attention: Optional[str] = "additive",
        flow: Optional[str] = "bahdanau",
        arch: str = "rnn",
        input_feed: bool = True,
        cell: str = "gru",
        emb_size: PositiveInt = 64,
        hidden_size: PositiveInt = 64,
        dec_hidden_size: Optional[PositiveInt] = None,
        num_layers: PositiveInt = 1,
        bidirectional: bool = True,
        dropout: NonNegativeFloat = 0.0,
        attn_size: Optional[PositiveInt] = None,
        alignment: str = "global",
        window: PositiveInt = 10,
        heads: PositiveInt = 1,
        coverage: bool = False,
        max_source_length: PositiveInt = 100,
        score_scale: Literal["none", "sqrt_d"] = "none",
        coverage_loss: NonNegativeFloat = 0.0,
        coverage_loss_from: NonNegativeFloat = 0.0,
        coverage_penalty: NonNegativeFloat = 0.0,
        ffn_size: PositiveInt = 1024,
        positions: str = "sinusoidal",
        norm: str = "pre",
        tie_embeddings: bool = False,
        param_init: NonNegativeFloat = 0.0,
        lr: PositiveFloat = 1e-3,
        weight_decay: NonNegativeFloat = 0.0,
        label_smoothing: NonNegativeFloat = 0.0,
        scheduler: Literal["none", "plateau", "cosine", "inverse_sqrt"] = "none",
        warmup_steps: NonNegativeInt = 0,
        val_decode_limit: NonNegativeInt = 256,
        test_buckets: tuple[PositiveInt, ...] = DEFAULT_BUCKETS,
        attention_examples: NonNegativeInt = 4,
        beam_size: PositiveInt = 1,
        alpha: NonNegativeFloat = 0.0,
        max_len_a: NonNegativeFloat = 2.0,
        max_len_b: NonNegativeInt = 10,
    ) -> None:
        super().__init__()
        if not 0 <= dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {dropout}")
        if coverage_loss > 0 and attention == "none":
            raise ConfigError("coverage_loss needs attention weights: pick a scorer, or coverage_loss 0")
        if not 0 <= coverage_loss_from < 1 or (coverage_loss_from > 0 and coverage_loss == 0):
            raise ConfigError(
                f"coverage_loss_from is the share of training before the coverage loss starts, in [0, 1), with "
                f"coverage_loss > 0 (got {coverage_loss_from} with coverage_loss {coverage_loss}): e.g. 0.8"
            )
        if not 0 <= label_smoothing < 1:
            raise ConfigError(f"label_smoothing must be in [0, 1), got {label_smoothing}: e.g. 0.1")
        if list(test_buckets) != sorted(set(test_buckets)):
            raise ConfigError(f"test_buckets must be increasing edges, got {list(test_buckets)}")
        self.save_hyperparameters()
        self.model = build_model(self.hparams)
        if param_init > 0:
            init_uniform(self.model, param_init)
        self.src_vocab: Optional[Vocab] = None
        self.trg_vocab: Optional[Vocab] = None
        self._evaluation = Evaluation(None)
        self._predictions: list[tuple[int, str]] = []
        self.tokenizers: Optional[dict[str, str]] = None  # JSON of the text tokenizers, if any
        self._fit_started: Optional[float] = None
        self._seconds_before = 0.0  # training seconds of the earlier attempts of a resumed fit (checkpointed)
        self._resumed_step: Optional[int] = None  # the update of the checkpoint a fit resumes from
        self._coverage_from = 0  # the update the coverage loss starts at (set when training starts)

    # -- vocabulary travels with the checkpoint ---------------------------------
    def datamodule(self) -> Optional[Seq2SeqDataModule]:
        """The trainer's data module when it is one of this package's (else None: plain dataloaders)."""
        datamodule = getattr(self.trainer, "datamodule", None)
        return datamodule if isinstance(datamodule, Seq2SeqDataModule) else None

    def setup(self, stage: str) -> None:
        datamodule = self.datamodule()
        if datamodule is not None:
            self.src_vocab, self.trg_vocab = datamodule.src_vocab, datamodule.trg_vocab
            self.tokenizers = datamodule.tokenizer_json()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.src_vocab is not None:
            checkpoint["vocab"] = {"src": self.src_vocab.itos, "trg": self.trg_vocab.itos}
        if self.tokenizers:
            checkpoint["tokenizers"] = self.tokenizers
        if self._fit_started is not None:
            checkpoint["fit_seconds"] = self.fit_seconds()

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """nn.Module's, after a one-line error for weights this code no longer reads with the same function."""
        scaled = [key for key in self.state_dict() if key.endswith("attention.head_scale")]
        if any(key.endswith("attention.bilinear") for key in state_dict) or not set(scaled) <= state_dict.keys():
            raise ConfigError(
                "checkpoint has multi-head attention that scored without the 1/sqrt(d_h) scale (general: with "
                "per-head bilinear weights); its heads now score q_iᵀ k_i / sqrt(d_h): train the model again"
            )
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._seconds_before = float(checkpoint.get("fit_seconds", 0.0))  # a resumed fit counts on from there
        self._resumed_step = int(checkpoint.get("global_step", 0))
        saved = checkpoint.get("hyper_parameters", {})
        check_same_function(saved)
        for key in ARCHITECTURE_KEYS:
            if key in saved and saved[key] != self.hparams.get(key):
                raise ConfigError(
                    f"checkpoint has {key}={saved[key]!r} but the config says {self.hparams.get(key)!r}: "
                    f"use the checkpoint's settings (drop the --model overrides) or train a new model"
                )
        if "vocab" in checkpoint:
            src, trg = Vocab(checkpoint["vocab"]["src"]), Vocab(checkpoint["vocab"]["trg"])
            if self.src_vocab is not None and (src != self.src_vocab or trg != self.trg_vocab):
                raise ConfigError(
                    "checkpoint vocabulary differs from the data's: use the data config the model was trained with"
                )
            self.src_vocab, self.trg_vocab = src, trg
        self.tokenizers = self.tokenizers or checkpoint.get("tokenizers")

    # -- training ---------------------------------------------------------------
    def on_fit_start(self) -> None:
        self._fit_started = time.monotonic()
        if self.trainer.ckpt_path is None:  # a new fit, also of weights loaded from an earlier run's checkpoint
            self._seconds_before, self._resumed_step = 0.0, None
        # trainer.log_dir broadcasts from rank 0: every DDP process must ask, not rank 0 alone
        run_dir = Path(self.trainer.log_dir or self.trainer.default_root_dir)
        if self.trainer.is_global_zero:
            if self._resumed_step is not None:  # the validations after the checkpoint are run again
                keep_history_until(run_dir / VAL_HISTORY, self._resumed_step)
            write_json(run_dir / "environment.json", environment_info())
            if self.datamodule() is not None:  # the tokenizers are inside every checkpoint too
                self.datamodule().save_tokenizers(run_dir)

    def fit_seconds(self) -> Optional[float]:
        """Seconds of training so far, over every attempt of a resumed fit; None before fit starts."""
        if self._fit_started is None:
            return None
        return self._seconds_before + time.monotonic() - self._fit_started

    def on_train_start(self) -> None:
        self._coverage_from = self.coverage_start()

    def coverage_start(self) -> int:
        """The update from which the coverage loss counts: ``coverage_loss_from`` of the training budget."""
        share = self.hparams.coverage_loss_from
        if share == 0:
            return 0
        self.check_callbacks(self.trainer.callbacks)
        total = self.trainer.max_steps if self.trainer.max_steps > 0 else self.trainer.estimated_stepping_batches
        return round(share * total)  # round: 0.07 * 100 is 7.000000000000001

    def check_callbacks(self, callbacks: list) -> None:
        """The one-line error for trainer callbacks this model cannot train with (``fit`` and the dry run ask)."""
        share = self.hparams.coverage_loss_from
        if share > 0 and any(isinstance(c, EarlyStopping) for c in callbacks):
            raise ConfigError(
                f"coverage_loss_from {share} is a share of a fixed budget of updates, which early stopping cuts "
                "short: drop the EarlyStopping callback, or set coverage_loss_from 0"
            )

    def coverage_weight(self) -> float:
        """λ of the coverage loss at this update: 0 before :meth:`coverage_start`."""
        return self.hparams.coverage_loss if self.global_step >= self._coverage_from else 0.0

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = token_loss(self.model, batch, self.hparams.label_smoothing, self.coverage_weight())
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at step {self.global_step}: lower the lr or "
                "enable gradient clipping (trainer.gradient_clip_val); the last checkpoint is kept"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

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
        out = self.model(batch.src, batch.src_lengths, batch.trg_in)  # teacher-forced logits (B, T, V)
        hyp = self.decode(batch, beam_size) if decode else None
        self._evaluation.add(batch, out.logits, out.weights, hyp, out.energies)

    def on_validation_epoch_start(self) -> None:
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
        """One line per validation in ``val_history.jsonl``: step, training seconds, overall and per bucket."""
        folder = Path(self.trainer.log_dir or self.trainer.default_root_dir)  # a collective: every process asks
        if self.trainer.is_global_zero:
            record = {"step": self.global_step, "epoch": self.current_epoch, "seconds": self.fit_seconds()}
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

    # -- optimisation -------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        optimizer = adam(self.parameters(), hp.lr, hp.weight_decay)
        if hp.scheduler == "plateau":
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=2)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss"}}
        if hp.scheduler in ("cosine", "inverse_sqrt"):
            total = int(self.trainer.estimated_stepping_batches)
            factor = lr_factor(hp.scheduler, total, hp.warmup_steps)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
        return optimizer
