"""Subword and word tokenisation with HF ``tokenizers``, trained on the train split only.

Both kinds split on spaces with the Metaspace scheme (a word-initial piece
starts with ``▁``), so detokenisation restores the original spacing; the
word-level kind also splits off punctuation. A tokenizer is stored as its JSON
string (in the run folder and inside the checkpoint), never as a pickle.
"""

from typing import Iterable, Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from seq2seq_attn.data.vocab import SPECIALS, UNK

TokenizerKind = Literal["word", "bpe"]


class TextTokenizer:
    """Text -> token strings and back. Ids come from :class:`~seq2seq_attn.data.vocab.Vocab`."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        kind: TokenizerKind = "bpe",
        vocab_size: int = 8000,
        min_freq: int = 1,
        lowercase: bool = False,
    ) -> "TextTokenizer":
        if kind == "word":
            tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
            tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()]
            )
            trainer = trainers.WordLevelTrainer(
                vocab_size=vocab_size, min_frequency=min_freq, special_tokens=list(SPECIALS), show_progress=False
            )
        else:
            tokenizer = Tokenizer(models.BPE(unk_token=UNK))
            tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
            trainer = trainers.BpeTrainer(
                vocab_size=vocab_size, min_frequency=min_freq, special_tokens=list(SPECIALS), show_progress=False
            )
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFC(), *([normalizers.Lowercase()] if lowercase else [])]
        )
        tokenizer.decoder = decoders.Metaspace()
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    def tokenize(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        return [e.tokens for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def detokenize(self, tokens: list[str]) -> str:
        """Token strings -> text; an unknown token keeps its own word."""
        return self.tokenizer.decoder.decode(["▁" + UNK if t == UNK else t for t in tokens]).strip()

    def vocabulary(self) -> list[str]:
        """The tokenizer's pieces in id order (specials first)."""
        vocab = self.tokenizer.get_vocab()
        return sorted(vocab, key=vocab.get)

    def to_json(self) -> str:
        return self.tokenizer.to_str()

    @classmethod
    def from_json(cls, text: str) -> "TextTokenizer":
        return cls(Tokenizer.from_str(text))
