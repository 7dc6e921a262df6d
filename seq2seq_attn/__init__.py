"""seq2seq-attn: attention in RNN sequence-to-sequence models.

Shape glossary used in every docstring and shape comment:

    B  batch size                 S  source length        T  target length
    E  embedding size             H  encoder output size (directions x hidden)
    D  decoder hidden size        A  attention size (additive/concat scorers)
    V  vocabulary size            L  RNN layers           K  beam size

Masks are ``(B, S)`` bool tensors with **True = real token** everywhere.
"""

__version__ = "0.1.0"
