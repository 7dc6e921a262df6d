"""The published results cannot drift from their cells: every committed results table and summary rebuilds
from the committed cells (what `seq2seq-attn report` draws its tables and figures from)."""

import shutil
from pathlib import Path

import pytest

from seq2seq_attn.ablation.check import report_drift
from seq2seq_attn.ablation.report import write_results_csv
from seq2seq_attn.cli import main
from seq2seq_attn.results import TRANSLATIONS

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
PUBLISHED = sorted(p for p in RESULTS.iterdir() if (p / "results.csv").is_file() and (p / "cells").is_dir())


def test_there_are_published_studies_to_check():
    assert len(PUBLISHED) >= 4


@pytest.mark.parametrize("folder", PUBLISHED, ids=lambda p: p.name)
def test_a_published_results_table_is_the_one_its_cells_give(folder, tmp_path):
    (tmp_path / "cells").symlink_to(folder / "cells")
    write_results_csv(tmp_path)
    assert (tmp_path / "results.csv").read_bytes() == (folder / "results.csv").read_bytes(), (
        f"{folder}/results.csv no longer matches its cells: run `seq2seq-attn report {folder}` and commit it"
    )


def has_translations(folder: Path) -> bool:
    return any(folder.glob(f"cells/*/{TRANSLATIONS}"))


REBUILD = [
    pytest.param(p, marks=[pytest.mark.slow] if has_translations(p) else [], id=p.name)  # text statistics: ~1 s a cell
    for p in PUBLISHED
]


@pytest.mark.parametrize("folder", REBUILD)
def test_a_published_summary_is_the_one_its_cells_give(folder):
    """summary.md and the statistics a page quotes, rebuilt from the cells (``seq2seq-attn report --check``)."""
    drift = report_drift(folder)
    assert not drift, f"{folder}: {drift}: run `seq2seq-attn report {folder}` and commit what it writes"


def test_the_check_names_a_summary_edited_by_hand(tmp_path, capsys):
    toy = RESULTS / "toy_reverse"
    copy = tmp_path / toy.name
    shutil.copytree(toy, copy, ignore=shutil.ignore_patterns("*.png"))
    main(["report", str(copy), "--check"])  # as committed: passes
    assert "is the one its cells give" in capsys.readouterr().out
    summary = copy / "summary.md"
    assert "0.654" in summary.read_text()  # the additive model's exact match, in its row
    summary.write_text(summary.read_text().replace("0.654", "0.700", 1))
    with pytest.raises(SystemExit):
        main(["report", str(copy), "--check"])
    error = capsys.readouterr().err
    assert "summary.md differs from what the cells give: run `seq2seq-attn report" in error
    assert error.count("\n") == 1  # one line
    summary.write_bytes((toy / "summary.md").read_bytes())
    shutil.rmtree(copy / "cells" / sorted(p.name for p in (copy / "cells").iterdir())[0])  # a cell lost
    with pytest.raises(SystemExit):
        main(["report", str(copy), "--check"])
    assert "results.csv differs" in capsys.readouterr().err


def test_the_check_without_cells_is_one_line(tmp_path, capsys):
    (tmp_path / "summary.md").write_text("# Ablation\n")
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path), "--check"])
    error = capsys.readouterr().err
    assert f"--check needs the cells the report is drawn from: no {tmp_path}/cells" in error
    assert error.count("\n") == 1
