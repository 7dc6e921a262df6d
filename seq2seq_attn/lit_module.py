"""Seq2SeqLitModule: the model's hyperparameters, training, and what a checkpoint carries.

The network is built from the hyperparameters by :mod:`seq2seq_attn.architecture`; validation, test and
predict are :class:`~seq2seq_attn.lit_evaluation.EvaluationSteps`, which this class extends. The model
parts (``seq2seq_attn/modules``) take tensors; this module, the training loss (:mod:`seq2seq_attn.loss`)
and the evaluation records (:mod:`seq2seq_attn.evaluation`) read them out of a
:class:`~seq2seq_attn.data.collate.Batch`.
"""

import time
from pathlib import Path
from typing import Any, Literal, Optional

import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from pytorch_lightning.callbacks import EarlyStopping, WeightAveraging
from pytorch_lightning.trainer.states import TrainerFn

from seq2seq_attn.architecture import ARCHITECTURE_KEYS, build_model, check_same_function, init_uniform
from seq2seq_attn.data.collate import Batch
from seq2seq_attn.data.vocab import Vocab
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.lit_evaluation import EvaluationSteps
from seq2seq_attn.loss import token_loss
from seq2seq_attn.metrics import DEFAULT_BUCKETS
from seq2seq_attn.optim import adam, lr_factor
from seq2seq_attn.results import VAL_HISTORY, environment_info, keep_history_until, write_json


class Seq2SeqLitModule(EvaluationSteps):
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
        self.tokenizers: Optional[dict[str, str]] = None  # JSON of the text tokenizers, if any
        self._fit_started: Optional[float] = None
        self._seconds_before = 0.0  # training seconds of the earlier attempts of a resumed fit (checkpointed)
        self._resumed_step: Optional[int] = None  # the update of the checkpoint a fit resumes from
        self._coverage_from = 0  # the update the coverage loss starts at (set when training starts)

    # -- vocabulary travels with the checkpoint ---------------------------------
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
        self._check_averaging(checkpoint)
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

    def _check_averaging(self, checkpoint: dict[str, Any]) -> None:
        """A fit resumed from a checkpoint of averaged weights needs the averaging callback: without it, training
        would go on from the average (the checkpoint's ``state_dict``) instead of the raw weights beside it."""
        trainer = self._trainer
        if "current_model_state" not in checkpoint or trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return
        if not any(isinstance(c, WeightAveraging) for c in trainer.callbacks):
            raise ConfigError(
                "the checkpoint holds a moving average of the weights beside the raw ones: resume it with its "
                "averaging callback in trainer.callbacks (as in experiments/bible_en_es/fast.yaml), or test it"
            )

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
