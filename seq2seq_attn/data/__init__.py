"""Data: vocabularies, toy tasks, parallel text, batching. Knows nothing of the model."""

from seq2seq_attn.data.collate import Batch, collate
from seq2seq_attn.data.datamodule import Seq2SeqDataModule, ToyDataModule
from seq2seq_attn.data.parallel import ParallelDataModule
from seq2seq_attn.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab

__all__ = [
    "Batch",
    "collate",
    "Seq2SeqDataModule",
    "ToyDataModule",
    "ParallelDataModule",
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Vocab",
]
