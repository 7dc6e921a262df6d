"""benchmarks/peers/peer_ratios.py divides speeds only when both sides ran under one OpenMP wait policy."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers" / "peer_ratios.py"


def write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def ratios(work: Path, peer_policy, ours_policy) -> dict[str, str]:
    """Writes one peer result and one of ours; returns the printed table rows by target."""
    tput = {"norm_tgt_tok_per_s": 2000, "peak_rss_mb": 2000.0}
    if peer_policy is not None:  # None: a result of the harness itself, which records no policy
        tput["omp_wait_policy"] = peer_policy
    write(work / "results" / "onmt_general.json", {"tput": tput})
    row = {"flow": "luong", "attention": "general", "input_feed": True, "precision": "32"}
    row.update(norm_tok_per_s=3000.0, train_peak_rss_mb=900.0, share_fp32_gemm=0.5, share_bf16_gemm=0.9)
    gemm = {"fp32_2048": 300.0, "bf16_2048": 150.0}
    write(work / "ours" / "throughput.json", {"gemm_gflops": gemm, "omp_wait_policy": ours_policy, "rows": [row]})
    done = subprocess.run([sys.executable, str(SCRIPT), str(work)], capture_output=True, text=True, check=True)
    return {line.split(" | ")[0].strip("| "): line for line in done.stdout.splitlines() if line.startswith("| ")}


TRAIN = "train tok/s, Luong general + feeding, fp32"
RSS = "peak RSS MB in training, general + feeding, fp32"


def test_same_policy_gives_the_ratio(tmp_path):
    line = ratios(tmp_path, "default", "default")[TRAIN]
    assert "1.50x" in line and "yes" in line


def test_different_policies_are_not_divided(tmp_path):
    line = ratios(tmp_path, None, "default")[TRAIN]  # the harness's own run used PASSIVE
    assert "not comparable" in line and "PASSIVE" in line and "1.50x" not in line


def test_rss_is_compared_whatever_the_policy(tmp_path):
    rss = ratios(tmp_path, "PASSIVE", "default")[RSS]
    assert "0.45x" in rss and "yes" in rss


def test_int8_decoding_is_divided_by_the_peer_as_shipped_and_by_its_int8(tmp_path):
    peer = {"sents_per_s": 500.0, "bleu": 35.0}
    peer8 = {"sents_per_s": 800.0, "bleu": 35.1}
    write(
        tmp_path / "results" / "onmt_mlp.json",
        {
            "decode": {"greedy": peer, "beam5": peer, "omp_wait_policy": "default"},
            "decode_int8": {"greedy": peer8, "beam5": peer8, "omp_wait_policy": "default"},
        },
    )
    write(tmp_path / "ours" / "decode.json", {"greedy": {"sents_per_s": 600.0, "omp_wait_policy": "default"}})
    ours8 = {"sents_per_s": 1100.0, "omp_wait_policy": "default"}
    write(tmp_path / "ours" / "decode_int8.json", {"greedy_int8": ours8})
    rows = ratios(tmp_path, "default", "default")
    assert "1.20x" in rows["decode sent/s, greedy (equal-budget models)"]
    shipped = rows["decode sent/s, greedy, ours int8 vs peers as shipped"]
    both = rows["decode sent/s, greedy, int8 both (peer's flag fixed)"]
    assert "2.20x" in shipped and "yes" in shipped
    assert "1.38x" in both and "NO" in both
