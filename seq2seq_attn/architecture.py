"""The network a set of hyperparameters describes, and which hyperparameters a checkpoint must match.

Plain PyTorch: :func:`build_model` turns the model's hyperparameters (``Seq2SeqLitModule``'s arguments)
into an RNN encoder-decoder (:func:`~seq2seq_attn.modules.build_seq2seq`) or a Transformer
(:func:`~seq2seq_attn.modules.transformer.build_transformer`); :data:`ARCHITECTURE_KEYS` are the ones that
change its shape or function, so a checkpoint is refused in one line when they differ.
"""

import torch

from seq2seq_attn.data.vocab import PAD_ID
from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules import build_seq2seq
from seq2seq_attn.modules.transformer import build_transformer


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
