"""ParallelDataModule: real translation corpora through the same pipeline as the toy tasks."""

import warnings
from pathlib import Path
from typing import Optional

from jsonargparse.typing import NonNegativeInt, PositiveInt

from seq2seq_attn.data.corpora import CORPORA, corpus_dir, find_file, read_parallel
from seq2seq_attn.data.datamodule import ExampleDataset, Seq2SeqDataModule
from seq2seq_attn.data.hf import read_translation
from seq2seq_attn.data.tokenizer import TextTokenizer, TokenizerKind
from seq2seq_attn.data.toy import Example
from seq2seq_attn.data.vocab import Vocab
from seq2seq_attn.errors import ConfigError

HF_SPLITS = {"train": "train", "val": "validation", "test": "test"}  # our split -> the usual hub split


class ParallelDataModule(Seq2SeqDataModule):
    """Sentence pairs from ``{split}.{lang}[.gz]`` files or a Hugging Face dataset; tokenizers trained on train.

    Args:
        corpus: a named corpus under the data root (``multi30k``, ``bible_en_es``), or None with ``data_dir``.
        data_dir: a folder of ``{split}.{lang}[.gz]`` files (overrides ``corpus``).
        data_root: where named corpora live; default ``$S2S_DATA_ROOT`` or ``~/.cache/seq2seq_attn/data``.
        hf_dataset: read a Hugging Face dataset instead of files (``corpus``, ``data_dir`` are
            ignored): a hub id (``wmt/wmt14``), a ``save_to_disk`` folder, or JSON(L) files
            named ``{split}.json[l]``; rows are ``{"translation": {src_lang: ..., trg_lang: ...}}``.
            Needs ``pip install 'seq2seq-attn[hf]'``.
        hf_config: the hub dataset's config, e.g. ``fr-en`` for ``wmt/wmt14``.
        src_lang, trg_lang: language codes, the file suffixes (the translation keys with ``hf_dataset``).
        splits: file prefix per split (train/val/test); defaults to the corpus recipe. With
            ``hf_dataset``: the dataset's split names, default ``train``/``validation``/``test``.
        tokenizer: ``word`` (words and punctuation) or ``bpe``; ``vocab_size`` caps it.
        joint: one tokenizer and vocabulary for both sides (BPE), else one per side.
        max_length: training pairs with a side longer than this many tokens are dropped
            (validation and test keep every line: long sentences are the point).
        train_max_words: training pairs with a side longer than this many words (whitespace-separated,
            before subwords) are dropped too, as Bahdanau et al. trained RNNsearch-30 and -50 on sentences
            of up to 30 and 50 words; the tokenizers still learn from every training pair, so models with
            different caps share one vocabulary. Test buckets beyond it are marked as extrapolation.
        max_train: use only the first N training pairs (0 = all), e.g. for quick tests.
    """

    def __init__(
        self,
        corpus: Optional[str] = "multi30k",
        src_lang: str = "de",
        trg_lang: str = "en",
        data_dir: Optional[str] = None,
        data_root: Optional[str] = None,
        hf_dataset: Optional[str] = None,
        hf_config: Optional[str] = None,
        splits: Optional[dict[str, str]] = None,
        tokenizer: TokenizerKind = "word",
        vocab_size: PositiveInt = 8000,
        min_freq: PositiveInt = 2,
        joint: bool = False,
        lowercase: bool = False,
        max_length: PositiveInt = 80,
        train_max_words: Optional[PositiveInt] = None,
        max_train: NonNegativeInt = 0,
        max_eval: NonNegativeInt = 0,
        batch_size: PositiveInt = 64,
        max_tokens: NonNegativeInt = 0,
        seed: int = 1234,
        num_workers: NonNegativeInt = 0,
    ) -> None:
        super().__init__(batch_size, max_tokens, seed, num_workers)
        self.hf_dataset, self.hf_config = hf_dataset, hf_config
        self.folder = None if hf_dataset else corpus_dir(corpus, data_dir, data_root)
        if hf_dataset:
            splits = {**HF_SPLITS, **(splits or {})}
        elif corpus in CORPORA and not data_dir:
            known = CORPORA[corpus]
            for lang in (src_lang, trg_lang):
                if lang not in known.languages:
                    raise ConfigError(
                        f"corpus {corpus!r} has no language {lang!r}: choose from {list(known.languages)}"
                    )
            splits = {**known.splits, **(splits or {})}
        self.splits = splits or {"train": "train", "val": "val", "test": "test"}
        self.langs = (src_lang, trg_lang)
        self.max_length, self.max_train, self.max_eval = max_length, max_train, max_eval
        self.train_max_words = train_max_words
        self.text: dict[str, tuple[list[str], list[str]]] = {}
        src_train, trg_train = self._read("train")
        pairs = [(s, t) for s, t in zip(src_train, trg_train) if s.strip() and t.strip()]
        if len(pairs) < len(src_train):
            warnings.warn(f"dropped {len(src_train) - len(pairs)} training pair(s) with an empty side", stacklevel=2)
        self.text["train"] = ([s for s, _ in pairs], [t for _, t in pairs])
        self.src_tokenizer, self.trg_tokenizer = self._train_tokenizers(
            tokenizer, vocab_size, min_freq, joint, lowercase
        )
        self.src_vocab = Vocab(self.src_tokenizer.vocabulary())
        self.trg_vocab = Vocab(self.trg_tokenizer.vocabulary())

    def _read(self, split: str) -> tuple[list[str], list[str]]:
        if split not in self.splits:
            raise ConfigError(f"no file prefix or dataset split for {split!r}: set data.init_args.splits.{split}")
        prefix = self.splits[split]
        limit = self.max_train if split == "train" else self.max_eval
        if self.hf_dataset:
            return read_translation(self.hf_dataset, self.hf_config, prefix, self.langs, limit)
        src, trg = read_parallel(*(find_file(self.folder, prefix, lang) for lang in self.langs))
        return (src[:limit], trg[:limit]) if limit else (src, trg)

    def _train_tokenizers(self, kind, vocab_size, min_freq, joint, lowercase):
        src, trg = self.text["train"]
        if joint:
            shared = TextTokenizer.train(src + trg, kind, vocab_size, min_freq, lowercase)
            return shared, shared
        return (
            TextTokenizer.train(src, kind, vocab_size, min_freq, lowercase),
            TextTokenizer.train(trg, kind, vocab_size, min_freq, lowercase),
        )

    @property
    def train_max_length(self) -> Optional[int]:
        return self.train_max_words  # buckets count source words; max_length counts tokens, and says nothing here

    def _examples(self, src: list[str], trg: list[str], chunk: int = 2048) -> list[Example]:
        examples = []
        for start in range(0, len(src), chunk):  # in chunks: the tokenizer's per-sentence encodings are large
            src_tok = self.src_tokenizer.tokenize_batch(src[start : start + chunk])
            trg_tok = self.trg_tokenizer.tokenize_batch(trg[start : start + chunk])
            examples += [
                Example(self.src_vocab.encode(s), self.trg_vocab.encode(t), None) for s, t in zip(src_tok, trg_tok)
            ]
        return examples

    def setup(self, stage: Optional[str] = None) -> None:
        for split in ("train", "val", "test"):
            if split in self.datasets:
                continue
            if split not in self.text:
                self.text[split] = self._read(split)
            examples = self._examples(*self.text[split])
            if split == "train":
                keep = self._short_enough(examples)
                examples = [e for e, k in zip(examples, keep) if k]
            else:  # evaluation keeps every line; an empty source is decoded as one unknown token
                examples = [e if e.src else Example([3], e.trg, None) for e in examples]
            self.datasets[split] = ExampleDataset(examples)

    def _short_enough(self, examples: list[Example]) -> list[bool]:
        """Which training pairs both caps keep: ``max_length`` tokens and ``train_max_words`` words a side."""
        keep = [len(e.src) <= self.max_length and len(e.trg) <= self.max_length for e in examples]
        if self.train_max_words is None:
            return keep
        words = [max(len(s.split()), len(t.split())) for s, t in zip(*self.text["train"])]
        return [k and n <= self.train_max_words for k, n in zip(keep, words)]

    # -- for evaluation: raw references, detokenisation, source length in words --------
    def text_source(self) -> "ParallelDataModule":
        return self

    def reference(self, split: str, index: int) -> str:
        return self.text[split][1][index]

    def source_text(self, split: str, index: int) -> str:
        return self.text[split][0][index]

    def source_length(self, split: str, index: int) -> int:
        return len(self.text[split][0][index].split())

    def detokenize(self, tokens: list[str]) -> str:
        return self.trg_tokenizer.detokenize(tokens)

    def tokenizer_json(self) -> dict[str, str]:
        return {"src": self.src_tokenizer.to_json(), "trg": self.trg_tokenizer.to_json()}

    def save_tokenizers(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for side, text in self.tokenizer_json().items():
            (folder / f"tokenizer.{side}.json").write_text(text, encoding="utf-8")
