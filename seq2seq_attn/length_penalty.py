"""How much of a model's loss on long sentences is the search's: the beam's length penalty tuned on dev.

After ``test`` has scored the protocol's search (``model.beam_size``, ``model.alpha``: the headline),
:class:`LengthPenaltySearch` decodes the dev split with the same beam at each length penalty α of its
``alphas``, keeps the α with the best dev BLEU, and decodes the test split with it too. Both go into
``length_penalty.json`` beside ``test_results.json``: BLEU, chrF and the output's length over the
reference's on dev for every α, the α chosen, and the test scores with it, overall and per source-length
bucket. A model that loses beyond its training cap by stopping early gains here; one that translates
long sentences badly does not.
"""

import time

import pytorch_lightning as pl
import torch
from jsonargparse.typing import NonNegativeFloat

from seq2seq_attn.evaluation import Evaluation, score_translations
from seq2seq_attn.results import LENGTH_PENALTY, write_json


def decode_split(trainer: "pl.Trainer", module: "pl.LightningModule", split: str, alpha: float) -> list[dict]:
    """Every example of ``split`` decoded with the module's beam and the length penalty ``alpha``, in the
    trainer's number format (as ``test`` decodes): :meth:`Evaluation.translations` rows."""
    datamodule = module.datamodule()
    evaluation = Evaluation(module.trg_vocab, module.src_vocab, split, datamodule.text_source(), 0)
    training = module.training
    module.eval()
    try:
        with torch.inference_mode(), trainer.precision_plugin.forward_context():
            for batch in datamodule.loader(split):
                batch = module.transfer_batch_to_device(batch, module.device, 0)
                hyp = module.decode(batch, module.hparams.beam_size, alpha)
                evaluation.add_hypotheses(batch.index.tolist(), hyp.to_lists())
    finally:  # the module's mode as it was, also when decoding fails
        module.train(training)
    return evaluation.translations()


class LengthPenaltySearch(pl.Callback):
    """After ``test``: the length penalty tuned on dev, and the test scores with it (``length_penalty.json``).

    Args:
        alphas: the length penalties α to try on dev (Wu et al. 2016's; e.g. ``[0.6, 1.0, 1.4]``); empty: off.
    """

    def __init__(self, alphas: list[NonNegativeFloat] = []) -> None:  # noqa: B006 - jsonargparse needs a list
        self.alphas = sorted(set(alphas))

    def on_test_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        datamodule = pl_module.datamodule()
        if not self.alphas or datamodule is None or datamodule.text_source() is None:
            return
        folder = pl_module.results_dir()  # on every process: it may ask trainer.log_dir, a collective
        if trainer.is_global_zero:
            write_json(folder / LENGTH_PENALTY, self.search(trainer, pl_module))

    def search(self, trainer: "pl.Trainer", module: "pl.LightningModule") -> dict:
        start = time.time()
        dev = [{"alpha": a, **self.scores(trainer, module, "val", a)[0]} for a in self.alphas]
        best = max(dev, key=lambda row: row["bleu"])  # the first of equals: the smallest α
        overall, by_bucket = self.scores(trainer, module, "test", best["alpha"])
        return {
            "beam_size": module.hparams.beam_size,
            "protocol_alpha": module.hparams.alpha,
            "dev": dev,
            "alpha": best["alpha"],
            "test": {"overall": overall, "buckets": [{"bucket": k, **v} for k, v in by_bucket.items()]},
            "seconds": round(time.time() - start, 1),
        }

    @staticmethod
    def scores(trainer: "pl.Trainer", module: "pl.LightningModule", split: str, alpha: float) -> tuple[dict, dict]:
        """:func:`score_translations` of ``split`` decoded with ``alpha``; the overall row with its count."""
        rows = decode_split(trainer, module, split, alpha)
        overall, by_bucket = score_translations(rows, module.hparams.test_buckets)
        return {"count": float(len(rows)), **overall}, by_bucket
