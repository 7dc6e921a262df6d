"""Writing result files: atomic, so a crash never leaves half a file behind."""

import csv
import io
import json
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence, Union

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.metrics import metric_items

PathLike = Union[str, Path]


TRANSLATIONS = "test_translations.jsonl.gz"  # per test sentence: source length, hypothesis, reference
VAL_HISTORY = "val_history.jsonl"  # one line per validation: step, training seconds, overall and per bucket
LENGTH_PENALTY = "length_penalty.json"  # the beam's length penalty tuned on dev, and the test scores with it


def write_atomic(path: PathLike, data: Union[str, bytes, memoryview]) -> Path:
    """Write text or bytes to a temporary file in the same folder, sync it, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") if isinstance(data, str) else os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: PathLike, data: Any) -> Path:
    return write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def keep_history_until(path: PathLike, step: int) -> None:
    """Cut a run's ``val_history.jsonl`` back to the validations at or before ``step`` (the update a resumed
    run continues from): the ones after it were lost with the killed attempt and run again, and a line cut
    short by the kill goes too. Written atomically; nothing happens where there is no file."""
    path = Path(path)
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line a kill cut short
            continue
        if record["step"] <= step:
            kept.append(line + "\n")
    write_atomic(path, "".join(kept))


def append_jsonl(path: PathLike, record: Any) -> Path:
    """Add one JSON line to ``path`` (a history that grows during a run; a kill loses at most that line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def write_jsonl_gz(path: PathLike, records: Sequence[Any]) -> Path:
    """``records`` as gzipped JSON lines, written atomically (the same bytes for the same records)."""
    import gzip

    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return write_atomic(path, gzip.compress(text.encode("utf-8"), mtime=0))


class DamagedFile(ConfigError):
    """A results file that cannot be read back (cut short, or not what its name says); one line naming it."""

    def __init__(self, path: PathLike, err: BaseException) -> None:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        super().__init__(
            f"{path} is damaged ({reason}): restore it (e.g. git checkout -- {path}), or delete the cell's "
            "result.json to run the cell again"
        )


def read_json(path: PathLike) -> Any:
    """A JSON results file; :class:`DamagedFile` where it cannot be parsed."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DamagedFile(path, err) from err


def read_jsonl(path: PathLike) -> list[Any]:
    """One JSON record per line (blank lines skipped); :class:`DamagedFile` where a line cannot be parsed."""
    try:
        return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DamagedFile(path, err) from err


def read_jsonl_gz(path: PathLike) -> list[Any]:
    """:func:`read_jsonl` of a gzip file; a truncated or corrupt archive is a :class:`DamagedFile` too."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DamagedFile(path, err) from err


def _rounded(value: Any, digits: int) -> Any:
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return float(f"{value:.{digits}g}")
    return value


def write_csv(path: PathLike, rows: Sequence[dict], columns: Sequence[str], digits: int | None = None) -> Path:
    """``rows`` as a CSV of ``columns``; with ``digits``, every float rounded to that many significant digits,
    so that a table of float sums reads the same on machines whose last bit differs."""
    if digits is not None:
        rows = [{key: _rounded(value, digits) for key, value in row.items()} for row in rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return write_atomic(path, buffer.getvalue())


def write_test_results(run_dir: PathLike, overall: dict, buckets: list[dict], meta: dict) -> Path:
    """``test_results.json`` (everything) and ``test_buckets.csv`` (one row per bucket x metric)."""
    run_dir = Path(run_dir)
    write_json(run_dir / "test_results.json", {"meta": meta, "overall": overall, "buckets": buckets})
    long_rows = [
        {"bucket": row["bucket"], "lo": row.get("lo"), "hi": row.get("hi"), "metric": metric, "value": value,
         "count": int(row["count"])}
        for row in [{"bucket": "all", **overall}, *buckets]
        for metric, value in metric_items(row)
    ]  # fmt: skip
    write_csv(run_dir / "test_buckets.csv", long_rows, ["bucket", "lo", "hi", "metric", "value", "count"])
    return run_dir / "test_results.json"


def environment_info() -> dict[str, Any]:
    """Versions and the git commit of this code, recorded beside every run for reproducibility."""
    import platform
    import subprocess
    from importlib import metadata

    versions = {}
    for package in ("seq2seq-attn", "torch", "pytorch-lightning", "jsonargparse", "tokenizers", "sacrebleu", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    here = Path(__file__).resolve().parent

    def git(*args: str) -> Any:
        try:
            done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    import torch

    from seq2seq_attn.precision import cpu_description

    cpu, flags = cpu_description()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        # the flags decide bf16/int8 speed; threads: the intra-op threads this process trains with
        "cpu": {"model": cpu, "flags": flags, "cores": os.cpu_count(), "threads": torch.get_num_threads()},
        "packages": versions,
        "git_commit": commit,
        "git_dirty": dirty,
    }


def plain(value):
    """A grid value as it was written: 4.0, read back from a CSV column with blanks, is 4."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
