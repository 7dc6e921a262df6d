"""``onmt_translate`` with the model quantised the way its ``-precision int8`` intends.

    PEERS_WORK/opennmt/venv/bin/python benchmarks/peers/onmt_int8.py ONMT_TRANSLATE_ARGS...

OpenNMT-py 3.5.1 accepts ``-precision int8`` but never quantises: ``load_test_model``
compares the option string with ``torch.int8`` (onmt/model_builder.py), which is never
equal, so the flag decodes in fp32 (on these machines: the same time, byte-identical
output). This launcher applies the call that branch was meant to run,
``quantize_dynamic(model, dtype=torch.qint8)`` (every Linear and RNN cell), so that our
``--int8`` decoding is compared with the peer's int8 as well as with its fp32.
Run with OpenNMT-py's interpreter; benchmarks/peers/peers_env.py ``decode_int8`` does.
"""

import sys
import warnings

import onmt.model_builder
import torch
from onmt.bin.translate import main

load_test_model = onmt.model_builder.load_test_model


def load_int8(*args, **kwargs):
    vocabs, model, model_opt = load_test_model(*args, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(model, dtype=torch.qint8)
    return vocabs, model, model_opt


onmt.model_builder.load_test_model = load_int8  # translator.py looks it up on the module per call
sys.exit(main())
