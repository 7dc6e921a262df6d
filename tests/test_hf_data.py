"""Hugging Face datasets as parallel text: saved folders, JSON lines, the data module, one-line errors.

No network: every dataset is generated here, the hub is offline and the cache lives in tmp_path.
``datasets`` is in the dev extra, so these tests fail (not skip) without it.
"""

import json
import sys
from pathlib import Path

import datasets
import huggingface_hub
import pytest
from hf_tiny import SPLITS, pairs, save_tiny_translation

from seq2seq_attn.cli import main
from seq2seq_attn.data import UNK_ID, ParallelDataModule
from seq2seq_attn.data.hf import read_translation
from seq2seq_attn.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EN_FR = ("en", "fr")


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch, tmp_path):
    """Nothing fetched, nothing written under HOME."""
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    for name, value in {**env, "HF_DATASETS_CACHE": str(tmp_path / "hf_cache")}.items():
        monkeypatch.setenv(name, value)
    # datasets and huggingface_hub read those variables once, when first imported
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def saved(tmp_path):
    return save_tiny_translation(tmp_path / "saved")


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"translation": row}) + "\n" for row in rows), encoding="utf-8")
    return path


def columns(rows, langs=EN_FR):
    return tuple([row[lang] for row in rows] for lang in langs)


@pytest.mark.parametrize("split", SPLITS)
def test_saved_dataset_dict_lines_come_back_in_order(saved, split):
    assert read_translation(saved, None, split, EN_FR) == columns(pairs(30, split))
    assert read_translation(saved, "ignored-for-local", split, ("fr", "en")) == columns(pairs(30, split), ("fr", "en"))
    assert read_translation(saved, None, split, EN_FR, limit=4) == columns(pairs(4, split))


def test_saved_single_dataset_is_its_own_split(tmp_path):
    datasets.Dataset.from_dict({"translation": pairs(5, "train")}).save_to_disk(str(tmp_path / "one"))
    assert read_translation(str(tmp_path / "one"), None, "train", EN_FR) == columns(pairs(5, "train"))


def test_json_lines_folder_and_file(tmp_path):
    for split in ("train", "validation"):
        write_jsonl(tmp_path / "json" / f"{split}.jsonl", pairs(7, split))
    assert read_translation(str(tmp_path / "json"), None, "validation", EN_FR) == columns(pairs(7, "validation"))
    single = write_jsonl(tmp_path / "dev.jsonl", pairs(3, "dev"))
    assert read_translation(str(single), None, "dev", ("fr", "en")) == columns(pairs(3, "dev"), ("fr", "en"))


def test_datamodule_builds_vocabularies_and_a_train_batch(saved):
    dm = ParallelDataModule(None, "en", "fr", hf_dataset=saved, min_freq=1, batch_size=4)
    for vocab, tokenizer, text in [
        (dm.src_vocab, dm.src_tokenizer, "the cat"),
        (dm.trg_vocab, dm.trg_tokenizer, "le chat"),
    ]:
        assert UNK_ID not in vocab.encode(tokenizer.tokenize(text)) and len(vocab) > 30  # the numbers 0-29 and words
    dm.setup("fit")
    assert [len(dm.datasets[split]) for split in ("train", "val", "test")] == [30, 30, 30]
    assert dm.reference("val", 3) == pairs(30, "validation")[3]["fr"]  # val reads the "validation" split
    batch = next(iter(dm.train_dataloader()))
    assert batch.src.shape[0] == 4 and batch.trg_out.shape[0] == 4
    remapped = ParallelDataModule(None, "fr", "en", hf_dataset=saved, splits={"test": "validation"}, max_eval=2)
    remapped.setup("test")
    assert remapped.source_text("test", 1) == pairs(2, "validation")[1]["fr"]


def no_column(folder):
    datasets.Dataset.from_dict({"en": ["a"], "fr": ["b"]}).save_to_disk(str(folder))
    return str(folder), "train", EN_FR


def missing_key(folder):
    return save_tiny_translation(folder, n=2), "train", ("en", "de")


def missing_split(folder):
    return save_tiny_translation(folder, n=2), "dev", EN_FR


def missing_json_split(folder):
    write_jsonl(folder / "train.jsonl", pairs(2, "train"))
    return str(folder), "validation", EN_FR


def empty_folder(folder):
    folder.mkdir()
    return str(folder), "train", EN_FR


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda folder: (str(folder / "nowhere"), "train", EN_FR), "unknown dataset"),
        (no_column, "has no 'translation' column (columns: ['en', 'fr'])"),
        (missing_key, "has no language 'de' (translation keys: ['en', 'fr']): set src_lang/trg_lang"),
        (missing_split, "has no split 'dev': available ['test', 'train', 'validation']; map train/val/test"),
        (missing_json_split, "has no split 'validation': available ['train']; map train/val/test"),
        (empty_folder, "neither a save_to_disk folder nor JSON files"),
    ],
    ids=["missing_path", "no_column", "missing_key", "missing_split", "missing_json_split", "empty_folder"],
)
def test_bad_local_input_is_one_line(make, expected, tmp_path):
    dataset, split, langs = make(tmp_path / "data")
    with pytest.raises(ConfigError) as info:
        read_translation(dataset, None, split, langs)
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def hub_raises(err):
    def load_dataset(*args, **kwargs):
        raise err

    return load_dataset


@pytest.mark.parametrize(
    "err,expected",
    [
        (
            datasets.exceptions.DatasetNotFoundError("Dataset 'nobody/nothing' doesn't exist on the Hub"),
            "unknown dataset 'nobody/nothing': the hub has none by that id",
        ),
        (
            ValueError("Unknown split \"dev\".\nShould be one of ['train', 'validation', 'test']."),
            "has no split 'dev' (Unknown split \"dev\". Should be one of ['train', 'validation', 'test'].); map",
        ),
        (
            ValueError("BuilderConfig 'xx-en' not found. Available: ['cs-en', 'fr-en']"),
            "has no config 'xx-en' (BuilderConfig 'xx-en' not found. Available: ['cs-en', 'fr-en']): set",
        ),
        (RuntimeError("something\ndeep\ninside"), "RuntimeError: something deep inside"),
    ],
    ids=["not_found", "split", "config", "other"],
)
def test_hub_errors_are_one_line(err, expected, monkeypatch):
    monkeypatch.setattr(datasets, "load_dataset", hub_raises(err))
    with pytest.raises(ConfigError) as info:
        read_translation("nobody/nothing", "xx-en", "dev", EN_FR)
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_offline_hub_names_the_local_alternatives():
    with pytest.raises(ConfigError) as info:
        read_translation("nobody/no-such-dataset", "fr-en", "train", EN_FR)
    message = str(info.value)
    assert "cannot reach the Hugging Face hub" in message and "save_to_disk folder" in message
    assert "\n" not in message


def test_missing_datasets_package_says_what_to_install(monkeypatch, saved):
    monkeypatch.setitem(sys.modules, "datasets", None)  # what `import datasets` meets when it is not installed
    with pytest.raises(ConfigError, match=r"^reading a Hugging Face dataset needs .*pip install 'seq2seq-attn\[hf\]'$"):
        ParallelDataModule(None, "en", "fr", hf_dataset=saved)


def test_cli_prints_one_error_line(tmp_path, capsys):
    config = tmp_path / "hf.yaml"
    folder = save_tiny_translation(tmp_path / "s", 2)
    config.write_text(
        "data:\n  class_path: seq2seq_attn.data.ParallelDataModule\n"
        f"  init_args: {{corpus: null, src_lang: en, trg_lang: de, hf_dataset: {folder}}}\n"
    )
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(ROOT / "experiments" / "base.yaml"), "--config", str(config)])
    assert info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "has no language 'de'" in errors[0], errors
