"""Does a published report still match its cells? ``seq2seq-attn report DIR --check``.

A results page quotes ``summary.md`` and the CSVs beside it; they are drawn from the committed cells by
:func:`~seq2seq_attn.ablation.report.write_report`. :func:`report_drift` draws them again in a scratch
folder from the same cells and says which committed file no longer matches: the text files byte for
byte, the statistics tables number for number (to 1e-8 relative: they are written to 10 significant
digits, and the last bit of a float sum, which may differ between machines, can tip the last digit). The
figures are drawn by the same call from the same tables, so they are not compared.
"""

import contextlib
import io
import shutil
import tempfile
from pathlib import Path

import pandas as pd

EXACT = ("summary.md", "results.csv")  # tables of the report, compared byte for byte
NUMERIC = ("statistics.csv", "significance.csv")  # bootstrap statistics, compared to 1e-8 relative
OUTPUTS = (*EXACT, *NUMERIC)


def _same_numbers(a: Path, b: Path) -> bool:
    x, y = pd.read_csv(a), pd.read_csv(b)
    if list(x.columns) != list(y.columns) or x.shape != y.shape:
        return False
    numeric = x.select_dtypes("number").columns
    text = [c for c in x.columns if c not in numeric]
    if not x[text].fillna("").equals(y[text].fillna("")):
        return False
    try:
        pd.testing.assert_frame_equal(x[numeric], y[numeric], check_dtype=False, rtol=1e-8, atol=0)
    except AssertionError:
        return False
    return True


def report_drift(folder: Path) -> list[str]:
    """The committed report files of ``folder`` that its cells no longer give, each with what differs."""
    from seq2seq_attn.ablation.report import write_report, write_results_csv

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as parent:
        scratch = Path(parent) / folder.resolve().name  # the report is named after its folder
        scratch.mkdir()
        for item in folder.iterdir():  # the grid file and other inputs; the cells by reference
            if item.name == "cells":
                (scratch / "cells").symlink_to(item.resolve())
            elif item.is_file() and item.name not in OUTPUTS and item.suffix != ".png":
                shutil.copy2(item, scratch / item.name)
        with contextlib.redirect_stdout(io.StringIO()):
            write_results_csv(scratch)
            write_report(scratch)
        drift = []
        for name in OUTPUTS:
            committed, rebuilt = folder / name, scratch / name
            if committed.is_file() != rebuilt.is_file():
                state = "is committed but the cells give none" if committed.is_file() else "is missing"
                drift.append(f"{name} {state}")
            elif committed.is_file():
                same = (
                    committed.read_bytes() == rebuilt.read_bytes()
                    if name in EXACT
                    else _same_numbers(committed, rebuilt)
                )
                if not same:
                    drift.append(f"{name} differs from what the cells give")
        return drift
