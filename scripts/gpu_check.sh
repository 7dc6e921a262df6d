#!/usr/bin/env bash
# Short GPU check: fit, test and translate on CUDA (fp32 and bf16-mixed), and the training
# and decoding speed of the shared reference model size on the GPU.
#
#   bash scripts/gpu_check.sh            # PY=python3, OUT_DIR=runs/gpu_check
#   MULTI30K_SECONDS=150 bash scripts/gpu_check.sh
#
# Without a CUDA device it says so and exits 0: the project needs no GPU.
# GPU_CHECK_DEVICE=cpu runs the same steps on the CPU (a smoke test of this script).
# With $S2S_DATA_ROOT/multi30k present it also trains the Multi30k model for
# MULTI30K_SECONDS (default 150) and reports test BLEU with beam 5.
set -euo pipefail
PY=${PY:-python3}
OUT_DIR=${OUT_DIR:-runs/gpu_check}
MULTI30K_SECONDS=${MULTI30K_SECONDS:-150}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"

if [ "$DEVICE" = cuda ] && ! $PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA device visible: nothing to check (everything else runs on the CPU)"
    exit 0
fi
$PY -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
CLI="$PY -m seq2seq_attn.cli"
GPU="--trainer.accelerator $([ "$DEVICE" = cuda ] && echo gpu || echo cpu) --trainer.devices 1 --trainer.enable_progress_bar false"

echo "== toy reverse: fit + test (beam 5) on CUDA, fp32 and bf16-mixed"
for precision in 32-true bf16-mixed; do
    start=$(date +%s)
    $CLI fit --config experiments/base.yaml --config experiments/toy/reverse.yaml $GPU \
        --trainer.precision $precision --trainer.max_epochs 4 \
        --trainer.logger.init_args.save_dir "$OUT_DIR" --trainer.logger.init_args.name "toy_$precision" \
        --trainer.logger.init_args.version 0 >"$OUT_DIR.toy_$precision.log" 2>&1 || { tail -30 "$OUT_DIR.toy_$precision.log"; exit 1; }
    ckpt="$OUT_DIR/toy_$precision/version_0/checkpoints/best.ckpt"
    $CLI test --config experiments/base.yaml --config experiments/toy/reverse.yaml $GPU \
        --trainer.precision $precision --trainer.logger false --model.beam_size 5 --ckpt_path "$ckpt" \
        2>&1 | sed -n '/Test results/,$p' 
    echo "   $precision: fit + test took $(($(date +%s) - start)) s"
done
printf 'a b c d e f g\n\nk j i h g f e d c b\n' >"$OUT_DIR.toy_input.txt"
echo "== translate --device $DEVICE (toy reverse; the empty line stays empty)"
$CLI translate --ckpt "$OUT_DIR/toy_32-true/version_0/checkpoints/best.ckpt" --device "$DEVICE" \
    --input "$OUT_DIR.toy_input.txt"

echo "== reference model size on CUDA (batch 64, S=T=30, vocab 8000)"
$PY benchmarks/step_speed.py --device "$DEVICE" --quick --steps 30 --decode-repeats 6
$PY benchmarks/step_speed.py --device "$DEVICE" --quick --steps 30 --decode-repeats 6 --bf16

if [ -d "${S2S_DATA_ROOT:-../shared/data}/multi30k" ] && [ "$MULTI30K_SECONDS" -gt 0 ]; then
    echo "== Multi30k de-en, additive attention, ${MULTI30K_SECONDS} s of training on CUDA, then test (beam 5)"
    max_time=$(printf '00:00:%02d:%02d' $((MULTI30K_SECONDS / 60)) $((MULTI30K_SECONDS % 60)))
    $CLI fit --config experiments/base.yaml --config experiments/multi30k_de_en/base.yaml \
        --config experiments/multi30k_de_en/bahdanau_additive.yaml $GPU --trainer.max_epochs 30 \
        --trainer.max_time "$max_time" --trainer.logger.init_args.save_dir "$OUT_DIR" \
        --trainer.logger.init_args.name multi30k --trainer.logger.init_args.version 0 \
        >"$OUT_DIR.multi30k.log" 2>&1 || { tail -30 "$OUT_DIR.multi30k.log"; exit 1; }
    grep -E "max_time|Epoch" "$OUT_DIR.multi30k.log" | tail -2 || true
    $CLI test --config experiments/base.yaml --config experiments/multi30k_de_en/base.yaml $GPU \
        --trainer.logger false --ckpt_path "$OUT_DIR/multi30k/version_0/checkpoints/best.ckpt" \
        2>&1 | sed -n '/Test results/,$p' 
    metrics="$OUT_DIR/multi30k/version_0/metrics.csv"
    [ -f "$metrics" ] && $PY - "$metrics" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("val/bleu")]
for r in rows:
    print(f"   epoch {r['epoch']} step {r['step']}: val loss {float(r['val/loss']):.3f}  val BLEU (greedy) {float(r['val/bleu']):.2f}")
EOF
fi
echo "gpu check: OK"
