#!/usr/bin/env bash
# Run what is missing of an ablation grid on one CUDA device within a time budget, and pack the finished
# cells' small files into one archive (a lent GPU machine starts bare and hands back a few files only).
#
#   GRID=experiments/ablations/bible_converged.yaml PUBLISHED=docs/results/bible_en_es_converged \
#       S2S_DATA_ROOT=DIR BUDGET_SECONDS=540 ARCHIVE=$OUT/cells.tar.gz bash scripts/gpu_grid.sh
#   tar -xzf cells.tar.gz -C docs/results/bible_en_es_converged      # back on the CPU machine
#   seq2seq-attn report docs/results/bible_en_es_converged
#
# The cells already in $PUBLISHED/cells are copied into the run folder first, so only the missing ones
# run, in the grid's order, one at a time, with every setting of the CPU run (`precision: auto` picks fp32
# on CUDA: bf16 autocast was slower at these sizes on an H200, docs/performance.md). At BUDGET_SECONDS the
# runner is interrupted: finished cells are kept, the cell in training is lost with the machine. The
# archive holds cells/<cell>/ (the files `ablate --publish` copies) and summary.md of what ran.
# Without a CUDA device it says so and exits 0; GPU_GRID_DEVICE=cpu runs the same steps on the CPU (a
# smoke test of this script).
set -euo pipefail
PY=${PY:-python3}
GRID=${GRID:?set GRID to a grid file, e.g. experiments/ablations/bible_converged.yaml}
PUBLISHED=${PUBLISHED:-}
BUDGET_SECONDS=${BUDGET_SECONDS:-540}
ARCHIVE=${ARCHIVE:-runs/gpu_grid_cells.tar.gz}
DEVICE=${GPU_GRID_DEVICE:-cuda}
export PYTHONUNBUFFERED=1

if [ "$DEVICE" = cuda ] && ! $PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA device visible: nothing to run (the grid runs on the CPU with seq2seq-attn ablate)"
    exit 0
fi
export S2S_RUNS_ROOT=${S2S_RUNS_ROOT:-$(mktemp -d)}
stage=$(mktemp -d)
cells="$($PY -c "import sys
from seq2seq_attn.ablation.grid import Grid
from seq2seq_attn.ablation.runner import default_out
print(default_out(Grid.load(sys.argv[1])))" "$GRID")/cells"   # where ablate looks for finished cells
mkdir -p "$cells"
if [ -n "$PUBLISHED" ] && [ -d "$PUBLISHED/cells" ]; then
    cp -r "$PUBLISHED/cells/." "$cells/"
fi
accelerator=$([ "$DEVICE" = cuda ] && echo gpu || echo cpu)
status=0
timeout -s INT -k 60 "$BUDGET_SECONDS" $PY -m seq2seq_attn.cli ablate "$GRID" --jobs 1 --publish "$stage" \
    --set trainer.accelerator=$accelerator --set trainer.devices=1 || status=$?
if [ ! -d "$stage/cells" ]; then
    echo "no cell finished within ${BUDGET_SECONDS} s (ablate exited $status)"
    exit 1
fi
mkdir -p "$(dirname "$ARCHIVE")"
tar -czf "$ARCHIVE" -C "$stage" cells $([ -f "$stage/summary.md" ] && echo summary.md)
echo "packed $(ls "$stage/cells" | wc -l) finished cell(s) into $ARCHIVE (ablate exited $status)"
