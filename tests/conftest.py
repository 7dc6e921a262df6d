"""Shared fixtures: tiny seeded tensors and models, one thread, no W&B."""

import os
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import V_SRC

os.environ.setdefault("WANDB_MODE", "disabled")
# the test process is a library user's: the CPU tuning of seq2seq_attn/cpu.py stays off in it
os.environ.setdefault("S2S_CPU_TUNING", "0")
# the precision probe's per-machine cache (seq2seq_attn/precision.py) goes to a folder of this session
os.environ["S2S_CACHE_DIR"] = tempfile.mkdtemp(prefix="s2s-cache-")
# Real corpora only where the user or CI names a folder of them: the tests marked `corpus` read them
# (S2S_DATA_ROOT=DIR make test). Every other test reads the small generated corpora in the
# repository (tests/data/make_corpora.py), so a fresh clone with nothing beside it passes.
# The user's folder is kept in S2S_TEST_CORPUS_ROOT: pytest-xdist's workers inherit the environment set here.
CORPUS_ROOT = os.environ.setdefault("S2S_TEST_CORPUS_ROOT", os.environ.get("S2S_DATA_ROOT", "")) or None
FIXTURE_CORPORA = Path(__file__).resolve().parent / "data" / "corpora"
os.environ["S2S_DATA_ROOT"] = str(FIXTURE_CORPORA)
torch.set_num_threads(1)


@pytest.fixture
def real_corpus(request, monkeypatch):
    """``real_corpus(name)``: the folder of a full corpus, for tests marked ``corpus`` (and the data root
    pointed at it); skips, naming the command that gets the corpus, where there is none."""
    assert request.node.get_closest_marker("corpus"), "mark the test @pytest.mark.corpus"

    def get(name: str) -> Path:
        folder = Path(CORPUS_ROOT or "") / name
        if not CORPUS_ROOT or not folder.is_dir():
            pytest.skip(
                f"needs the full {name} corpus: run `seq2seq-attn data fetch {name} --root DIR`, "
                "then S2S_DATA_ROOT=DIR make test"
            )
        monkeypatch.setenv("S2S_DATA_ROOT", CORPUS_ROOT)
        return folder

    return get


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def src_batch():
    """B=3, S=5, lengths [5, 3, 1]: padded with 0."""
    lengths = torch.tensor([5, 3, 1])
    src = torch.randint(4, V_SRC, (3, 5))
    src[torch.arange(5).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return src, lengths
