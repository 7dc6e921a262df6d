"""The published results cannot drift from their cells: every committed results table rebuilds from the
committed cells byte for byte (what `seq2seq-attn report` draws its tables and figures from)."""

from pathlib import Path

import pytest

from seq2seq_attn.ablation.report import write_results_csv

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
