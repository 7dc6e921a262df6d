"""Both notebooks execute against a tiny ablation made here."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_ablation import write_grid

from seq2seq_attn.ablation.runner import ablate

pytestmark = pytest.mark.slow  # fresh interpreters and kernels: seconds each

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def tiny_ablation(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb")
    grid = write_grid(tmp, {"model.attention": ["none", "dot"], "model.flow": ["none", "luong"]})
    ablate(str(grid), str(tmp / "out"), jobs=2)
    return tmp / "out"


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_length_degradation.ipynb", "02_attention_maps.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes_and_is_stripped(path, tiny_ablation, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "strip outputs before committing"
    monkeypatch.setenv("S2S_ABLATION_DIR", str(tiny_ablation))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(o.output_type in ("display_data", "execute_result") for o in outputs)
    # it read the tiny ablation made here (dot and none), not another one (the demo's has additive)
    shown = " ".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "dot" in shown and "additive" not in shown, shown[:500]
