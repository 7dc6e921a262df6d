"""Vocabularies: token <-> id maps with fixed special ids, saved as JSON."""

import json
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence, Union

from seq2seq_attn.errors import ConfigError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = (PAD, BOS, EOS, UNK)


class Vocab:
    """A token list whose first four entries are ``<pad> <s> </s> <unk>``."""

    def __init__(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        if tuple(tokens[:4]) != SPECIALS:
            tokens = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        if len(set(tokens)) != len(tokens):
            raise ConfigError("vocabulary has duplicate tokens: each token must appear once")
        self.itos = tokens
        self.stoi = {t: i for i, t in enumerate(tokens)}

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int = 0) -> "Vocab":
        """Most frequent tokens first (ties alphabetical), so the result is deterministic."""
        counts = Counter(tok for sent in sentences for tok in sent)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        return cls(ranked[:max_size] if max_size > 0 else ranked)

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Ids to tokens, stopping at EOS and skipping PAD/BOS."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(self.itos[i])
        return out

    def to_text(self, ids: Sequence[int], detokenize: Callable[[list[str]], str] = " ".join) -> str:
        """Ids to text as a reader sees it: :meth:`decode`, then the tokenizer's ``detokenize`` (a subword
        model's pieces joined into words); the one way outputs become text (evaluation, predict, translate)."""
        return detokenize(self.decode(ids))

    def to_json(self) -> str:
        return json.dumps(self.itos, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Vocab":
        return cls(json.loads(text))

    def save(self, path: Union[str, Path]) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Vocab":
        return cls.from_json(Path(path).read_text(encoding="utf-8"))
