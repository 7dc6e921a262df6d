"""Int8 weights for decoding on CPU: a dynamically quantised copy of a trained model.

Every ``nn.Linear`` the model calls and every GRU/LSTM gets int8 weights (one scale per
tensor) and quantises its input per call, so each matrix product runs as an int8 GEMM
(fbgemm, AVX-512 VNNI on these machines): 3-4x the fp32 rate at the decoder's 64 rows
and 5-8x once most sentences of a batch have stopped. Embeddings, attention energies and
the softmax stay in fp32, as do the weights a scorer reads as tensors
(:attr:`Scorer.raw_weights`). This is what CTranslate2 does by default on CPU and what
OpenNMT-py's ``-precision int8`` intends. Decoding only: training and checkpoints stay fp32.
"""

import warnings

from torch import nn

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.scorers import Scorer
from seq2seq_attn.modules.seq2seq import Seq2Seq


def float_only(model: nn.Module) -> set[str]:
    """Names of the modules that must keep float weights (read as tensors, not called)."""
    keep = set()
    for name, module in model.named_modules():
        if isinstance(module, Scorer):
            keep.update(f"{name}.{child}" if name else child for child in module.raw_weights)
    return keep


def int8_copy(model: Seq2Seq) -> Seq2Seq:
    """A copy of ``model`` with int8 Linear and RNN weights, for decoding on CPU; ``model`` is unchanged."""
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ConfigError("int8 decoding runs on CPU only: pass --device cpu, or drop --int8 to decode on the GPU")
    with warnings.catch_warnings():  # torch 2.13 marks the eager API deprecated; it is what runs fbgemm's int8 GEMM
        warnings.simplefilter("ignore")
        try:
            from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
        except ImportError as err:
            raise ConfigError(f"this torch has no dynamic quantisation ({err}): decode without --int8") from err
        keep = float_only(model)
        spec = {
            name: default_dynamic_qconfig
            for name, module in model.named_modules()
            if isinstance(module, (nn.Linear, nn.RNNBase)) and name not in keep
        }
        return quantize_dynamic(model, spec, inplace=False).eval()
