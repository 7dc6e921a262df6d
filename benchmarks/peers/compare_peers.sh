#!/usr/bin/env bash
# Ours vs Joey NMT 2.3.0 and OpenNMT-py 3.5.1 on the shared Multi30k model, one after another, in one
# invocation; prints the target ratios of docs/measurements/peers.md. Never run anything else on the machine meanwhile.
#
#   bash benchmarks/peers/compare_peers.sh                 # throughput + peak RSS (about 25 min on 2 cores)
#   BUDGET_MIN=10 bash benchmarks/peers/compare_peers.sh bleu   # + equal-budget training, decoding and BLEU
#   bash benchmarks/peers/compare_peers.sh decode          # decoding and BLEU only, of the last bleu run's models
#
# The peers come from ../shared/tools/peers (PEERS_HARNESS): it makes their venvs (torch 2.13.0 CPU
# first), tokenises the data and writes their configs; its results land in $PEERS_WORK (default
# runs/peers) and ours in $PEERS_WORK/ours. Set PEERS=... to choose the peers (default: all four).
# The equal-budget run trains ours on lowercased text like the peers' (their harness lowercases), with
# no validation (neither do theirs), parameters initialised uniform in +-0.1 like OpenNMT-py's (chosen on
# the dev set: 36.04 -> 36.78 BLEU, beam 5), and scores both the harness's way (benchmarks/peers/harness_bleu.py).
#
# One environment for all: the harness itself starts the peers with OMP_WAIT_POLICY=PASSIVE, which
# slows OpenNMT-py by 11-27% and us by 15-29% (OpenMP threads sleep after every parallel region). Here the
# peers run through benchmarks/peers/peers_env.py with the caller's policy (unset = libgomp's default, what
# users get), our runs inherit the same, and every result records it; peer_ratios.py refuses to divide
# numbers measured under different policies. BLEU_PEERS (default: the additive peer onmt_mlp, the model
# our budget run trains) chooses the peers of the equal-budget run.
set -euo pipefail
cd "$(dirname "$0")/../.."
HARNESS=$(cd "${PEERS_HARNESS:-../shared/tools/peers}" && pwd)
export PEERS_WORK=${PEERS_WORK:-$PWD/runs/peers}
export S2S_DATA_ROOT=${S2S_DATA_ROOT:-$PWD/../shared/data}
PY=${PY:-.venv/bin/python}
PEERS=${PEERS:-onmt_general onmt_mlp joey_luong joey_bahdanau}
BUDGET_MIN=${BUDGET_MIN:-10}
BLEU_PEERS=${BLEU_PEERS:-onmt_mlp}
mkdir -p "$PEERS_WORK/ours"
echo "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-<unset: libgomp default>} for the peers and for ours"
peer() {  # peer tput|budget|decode SYSTEM [MINUTES]: the harness's measurement under our environment
    PEERS_HARNESS="$HARNESS" python3 benchmarks/peers/peers_env.py "$@"
}

MODE=${1:-tput}
case "$MODE" in tput | bleu | decode) ;; *) echo "unknown mode $MODE: choose tput (default), bleu or decode" >&2; exit 2 ;; esac
[ -x "$PEERS_WORK/opennmt/venv/bin/onmt_train" ] || bash "$HARNESS/run_peers.sh" setup
[ -s "$PEERS_WORK/data/tok/vocab.en" ] || bash "$HARNESS/run_peers.sh" data
run="$PEERS_WORK/ours/budget"
if [ "$MODE" != decode ]; then
    for s in $PEERS; do rm -rf "$PEERS_WORK/runs/${s}_tput"; peer tput "$s"; done
    OMP_NUM_THREADS=2 $PY benchmarks/throughput.py --variants peers --precisions 32 bf16 --json "$PEERS_WORK/ours/throughput.json"
fi
if [ "$MODE" = bleu ]; then
    for s in $BLEU_PEERS; do rm -rf "$PEERS_WORK/runs/${s}_budget"; peer budget "$s" "$BUDGET_MIN"; done
    rm -rf "$run"
    OMP_NUM_THREADS=2 $PY -m seq2seq_attn.cli fit --config experiments/base.yaml \
        --config experiments/multi30k_de_en/base.yaml --config experiments/multi30k_de_en/luong_additive.yaml \
        --data.init_args.lowercase true --model.param_init 0.1 --trainer.max_epochs 1000 --trainer.max_time "00:00:$(printf %02d "$BUDGET_MIN"):00" \
        --trainer.limit_val_batches 0 --trainer.num_sanity_val_steps 0 --trainer.enable_progress_bar false \
        --trainer.logger.init_args.save_dir "$run" --trainer.logger.init_args.name "" \
        --trainer.logger.init_args.version "" >"$PEERS_WORK/ours/budget.log" 2>&1
fi
if [ "$MODE" != tput ]; then
    [ -s "$run/checkpoints/last.ckpt" ] || { echo "no equal-budget model in $run: run 'compare_peers.sh bleu' first" >&2; exit 2; }
    # the peers in fp32, and OpenNMT-py with int8 weights as its -precision int8 intends (benchmarks/peers/onmt_int8.py)
    for s in $BLEU_PEERS; do
        peer decode "$s"
        case "$s" in onmt_*) peer decode_int8 "$s" ;; esac
    done
    # ours timed like OpenNMT-py's "Generation took": load and tokenisation excluded, alpha 0, max 100 tokens;
    # in fp32, with int8 weights (--int8), and beam 5 with the length penalty chosen on the dev set (val):
    # alpha 1.0 (0: 36.78, 0.6: 37.47, 1.0: 38.03)
    test="$PEERS_WORK/data/test_2016_flickr.de"
    for extra in "--json $PEERS_WORK/ours/decode.json" "--json $PEERS_WORK/ours/decode_int8.json --int8" \
        "--json $PEERS_WORK/ours/decode_alpha.json --beams 5 --alpha 1.0"; do
        # shellcheck disable=SC2086  # $extra is a list of flags
        OMP_NUM_THREADS=2 $PY benchmarks/decode_speed.py "$run/checkpoints/last.ckpt" "$test" --out-dir "$PEERS_WORK/ours" $extra
    done
    for name in beam1 beam5 beam1_int8 beam5_int8 beam5_alpha1.0; do
        bleu=$($PY benchmarks/peers/harness_bleu.py "$PEERS_WORK/ours/$name.txt")
        echo "{\"output\": \"$name\", \"bleu\": $bleu}" >"$PEERS_WORK/ours/bleu_$name.json"
    done
fi
bash "$HARNESS/run_peers.sh" table >"$PEERS_WORK/RESULTS.md"
$PY benchmarks/peers/peer_ratios.py "$PEERS_WORK"
