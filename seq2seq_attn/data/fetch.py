"""Downloading corpora when online, verified by sha256 before use.

    seq2seq-attn data fetch multi30k [--root DIR]
    seq2seq-attn data fetch bible_en_es [--root DIR] [--modules DIR]

Files come from the public GitHub repository ``multi30k/dataset`` at a fixed
commit; each is checked against the sha256 recorded for it, and a mismatch
deletes the file and says so. Nothing is extracted, so no archive can write
outside the target folder. ``bible_en_es`` is not downloaded but built from
SWORD Bible modules on this machine (``bible_build.py``).
"""

import hashlib
import urllib.request
from pathlib import Path
from typing import NamedTuple, Optional

from seq2seq_attn.data.corpora import data_root
from seq2seq_attn.errors import ConfigError

MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw"


BUILT = ("bible_en_es",)  # corpora built locally rather than downloaded


class Remote(NamedTuple):
    base_url: str
    sha256: dict[str, str]  # file name -> hex digest


SOURCES: dict[str, Remote] = {
    "multi30k": Remote(
        MULTI30K_URL,
        {
            "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
            "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
            "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
            "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
            "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
            "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
            "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
            "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
            "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
        },
    ),
}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(
    corpus: str,
    root: Optional[str] = None,
    base_url: Optional[str] = None,
    timeout: float = 60.0,
    modules: Optional[str] = None,
) -> Path:
    """Download every file of ``corpus`` that is missing or corrupt (or build it); returns the corpus folder."""
    if corpus in BUILT:
        from seq2seq_attn.data.bible_build import build

        if base_url:
            raise ConfigError(f"{corpus} is built from SWORD modules, not downloaded: pass --modules, not --base-url")
        return build(data_root(root) / corpus, modules)
    if modules:
        raise ConfigError(f"--modules applies to {list(BUILT)} only; {corpus} is downloaded")
    if corpus not in SOURCES:
        raise ConfigError(f"no download source for corpus {corpus!r}: choose one of {sorted([*SOURCES, *BUILT])}")
    remote = SOURCES[corpus]
    folder = data_root(root) / corpus
    folder.mkdir(parents=True, exist_ok=True)
    bad = []
    for name, expected in remote.sha256.items():
        target = folder / name
        if target.is_file() and sha256_of(target) == expected:
            print(f"ok       {target}")
            continue
        partial = target.with_name(target.name + ".part")
        url = f"{(base_url or remote.base_url).rstrip('/')}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
        except OSError as err:
            partial.unlink(missing_ok=True)
            raise ConfigError(
                f"download of {url} failed ({err}): check the network, or copy the files to {folder}"
            ) from err
        if sha256_of(partial) != expected:
            partial.unlink()
            target.unlink(missing_ok=True)
            print(f"MISMATCH {target}: sha256 differs from the recorded sum; the file was deleted")
            bad.append(name)
            continue
        partial.replace(target)
        print(f"fetched  {target}")
    if bad:
        raise ConfigError(f"{len(bad)} file(s) failed the sha256 check and were deleted: {bad}; try again later")
    return folder
