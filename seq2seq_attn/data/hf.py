"""Parallel text from a Hugging Face dataset: the hub, a ``save_to_disk`` folder, or JSON lines.

Rows look like ``{"translation": {"en": "...", "fr": "..."}}``, as in WMT, IWSLT and
OPUS on the hub. ``datasets`` is the optional extra ``pip install 'seq2seq-attn[hf]'``
and is imported only when a dataset is read.
"""

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from seq2seq_attn.errors import ConfigError

COLUMN = "translation"
JSON_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
SPLIT_HINT = "map train/val/test to its splits with data.init_args.splits"


def import_datasets() -> ModuleType:
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise ConfigError(
            "reading a Hugging Face dataset needs the datasets package: pip install 'seq2seq-attn[hf]'"
        ) from None


def one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_translation(
    dataset: str, config: Optional[str], split: str, langs: tuple[str, str], limit: int = 0
) -> tuple[list[str], list[str]]:
    """The (source, target) lines of one split, in the dataset's order.

    Args:
        dataset: a hub id (``wmt/wmt14``), a ``save_to_disk`` folder (DatasetDict or
            Dataset), or a JSON(L) file or folder of files named ``{split}.json[l][.gz]``.
        config: the hub config (``fr-en``); ignored for local sources.
        split: the dataset's split name (``train``, ``validation``, ``test``).
        langs: the two keys of the ``translation`` column, source first.
        limit: keep only the first N rows (0 = all).
    """
    datasets = import_datasets()
    path = Path(dataset).expanduser()
    if path.exists():
        rows = local_split(datasets, path, split)
    elif dataset.startswith((".", "/", "~")) or dataset.endswith(JSON_SUFFIXES):
        raise ConfigError(
            f"unknown dataset {dataset!r}: no such file or folder: give a save_to_disk folder, JSON files or a hub id"
        )
    else:
        rows = hub_split(datasets, dataset, config, split)
    return translation_lines(rows, f"dataset {dataset!r} split {split!r}", langs, limit)


def pick(splits: dict[str, Any], split: str, source: Path) -> Any:
    if split not in splits:
        raise ConfigError(f"{source} has no split {split!r}: available {sorted(splits)}; {SPLIT_HINT}")
    return splits[split]


def local_split(datasets: ModuleType, path: Path, split: str) -> Any:
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as err:
            raise ConfigError(f"cannot read {path} with datasets.load_from_disk: {one_line(err)}") from err
        if isinstance(loaded, datasets.DatasetDict):
            return pick(dict(loaded), split, path)
        return pick({str(loaded.split or "train"): loaded}, split, path)  # one Dataset is one split
    files: dict[str, list[str]] = {}
    for file in [path] if path.is_file() else sorted(path.iterdir()):
        if file.name.endswith(JSON_SUFFIXES):
            files.setdefault(file.name.split(".")[0], []).append(str(file))
    if not files:
        raise ConfigError(
            f"{path} is neither a save_to_disk folder nor JSON files named {{split}}.json[l][.gz]: "
            "save the dataset with save_to_disk, or export each split as JSON lines"
        )
    split_files = pick(files, split, path)
    try:
        return datasets.load_dataset("json", data_files={split: split_files}, split=split)
    except Exception as err:
        raise ConfigError(f"cannot read the JSON files of split {split!r} in {path}: {one_line(err)}") from err


def hub_split(datasets: ModuleType, name: str, config: Optional[str], split: str) -> Any:
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as err:
        raise hub_error(datasets, err, name, config, split) from err


def hub_error(datasets: ModuleType, err: Exception, name: str, config: Optional[str], split: str) -> ConfigError:
    not_found = getattr(getattr(datasets, "exceptions", None), "DatasetNotFoundError", FileNotFoundError)
    message = one_line(err)
    full = f"{name!r}" + (f" (config {config!r})" if config else "")
    if isinstance(err, (not_found, FileNotFoundError)):
        return ConfigError(f"unknown dataset {name!r}: the hub has none by that id and there is no such local path")
    if isinstance(err, (ConnectionError, TimeoutError)) or "offline" in message.lower():
        return ConfigError(
            f"cannot reach the Hugging Face hub for {name!r} ({message}): go online, "
            "or set hf_dataset to a save_to_disk folder or JSON files"
        )
    if isinstance(err, ValueError) and "split" in message.lower():
        return ConfigError(f"dataset {full} has no split {split!r} ({message}); {SPLIT_HINT}")
    if isinstance(err, ValueError) and "config" in message.lower():
        return ConfigError(f"dataset {name!r} has no config {config!r} ({message}): set data.init_args.hf_config")
    return ConfigError(f"cannot load dataset {full} split {split!r}: {type(err).__name__}: {message}")


def translation_keys(feature: Any) -> list[str]:
    """The languages of a ``Translation`` feature or a struct of strings."""
    if hasattr(feature, "languages"):
        return list(feature.languages)
    return list(feature) if isinstance(feature, dict) else []


def translation_lines(rows: Any, source: str, langs: tuple[str, str], limit: int) -> tuple[list[str], list[str]]:
    if COLUMN not in rows.column_names:
        raise ConfigError(
            f"{source} has no {COLUMN!r} column (columns: {rows.column_names}): "
            "use a dataset of {'translation': {lang: text}} rows"
        )
    keys = translation_keys(rows.features[COLUMN])
    for lang in langs:
        if lang not in keys:
            raise ConfigError(f"{source} has no language {lang!r} (translation keys: {keys}): set src_lang/trg_lang")
    table = rows.with_format("arrow")[:]  # whole columns at once: no Python dict per row
    column = table.column(COLUMN).slice(0, limit or None)
    if len(column) == 0:
        raise ConfigError(f"{source} is empty: a split needs at least one sentence pair")
    import pyarrow.compute as pc  # a dependency of datasets

    src, trg = (pc.struct_field(column, [column.type.get_field_index(lang)]).to_pylist() for lang in langs)
    return [text or "" for text in src], [text or "" for text in trg]  # a missing side reads as empty
