"""A tiny generated en-fr translation dataset (no real corpus text) in Hugging Face ``datasets`` form."""

from pathlib import Path

SPLITS = ("train", "validation", "test")


def pairs(n: int, split: str) -> list[dict[str, str]]:
    return [
        {"en": f"the {split} cat number {i} sleeps .", "fr": f"le chat {split} numéro {i} dort ."} for i in range(n)
    ]


def save_tiny_translation(folder: Path, n: int = 30) -> str:
    """A DatasetDict (train/validation/test) written with ``save_to_disk``; returns the folder."""
    import datasets  # here, not at the top: test_cli imports this module only for the WMT configs

    splits = {split: datasets.Dataset.from_dict({"translation": pairs(n, split)}) for split in SPLITS}
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return str(folder)
