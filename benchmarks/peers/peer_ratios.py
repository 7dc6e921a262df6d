"""The target ratios from one compare_peers.sh run: ours / the fastest peer, target by target.

python benchmarks/peers/peer_ratios.py PEERS_WORK

A speed is divided only by one measured under the same OpenMP wait policy (recorded with
each result; the harness's own runs, which record none, used PASSIVE).
"""

import json
import sys
from pathlib import Path

HARNESS_POLICY = "PASSIVE"  # what the peer harness sets when not run through peers_env.py


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def policy(result: dict, default: str = HARNESS_POLICY) -> str:
    return result.get("omp_wait_policy", default)


def main() -> None:
    work = Path(sys.argv[1])
    peers = {p.stem: load(p) for p in sorted((work / "results").glob("*.json"))}
    ours = load(work / "ours" / "throughput.json")
    ours_policy = policy(ours, "default")
    rows = {(r["flow"], r["attention"], r["input_feed"], r["precision"]): r for r in ours.get("rows", [])}

    def peer_tput(names):
        found = {n: peers[n]["tput"] for n in names if peers.get(n, {}).get("tput")}
        if not found:
            return (None, None, None)
        name, best = max(found.items(), key=lambda kv: kv[1]["norm_tgt_tok_per_s"])
        return (name, best["norm_tgt_tok_per_s"], policy(best))

    lines = ["| target | ours | fastest peer | ratio | goal | met |", "|---|---|---|---|---|---|"]

    def add(label, mine, peer, goal, lower_is_better=False, mine_policy=None):
        """peer: (name, value, its OpenMP wait policy or None where the policy does not matter)."""
        mine_policy = mine_policy or ours_policy
        if mine is None or peer[1] is None:
            shown = "-" if mine is None else f"{mine:.0f}"
            lines.append(f"| {label} | {shown} | {peer[0]}: {peer[1]} | - | {goal}x | not measured |")
            return
        if peer[2] is not None and peer[2] != mine_policy:
            lines.append(
                f"| {label} | {mine:.0f} | {peer[0]}: {peer[1]:.0f} | - | {goal}x | not comparable: "
                f"OMP_WAIT_POLICY {mine_policy} (ours) vs {peer[2]} (peer) |"
            )
            return
        ratio = mine / peer[1]
        met = ratio <= goal if lower_is_better else ratio >= goal
        lines.append(
            f"| {label} | {mine:.0f} | {peer[0]}: {peer[1]:.0f} | {ratio:.2f}x | "
            f"{'<=' if lower_is_better else '>='} {goal}x | {'yes' if met else 'NO'} |"
        )

    def mine(flow, attention, feed, precision, key="norm_tok_per_s"):
        row = rows.get((flow, attention, feed, precision))
        return row.get(key) if row else None

    general, additive = ["onmt_general", "joey_luong"], ["onmt_mlp", "joey_bahdanau"]
    everyone = general + additive
    add("train tok/s, Luong general + feeding, fp32", mine("luong", "general", True, "32"), peer_tput(general), 1.25)
    add("train tok/s, Luong additive + feeding, fp32", mine("luong", "additive", True, "32"), peer_tput(additive), 1.25)
    add("train tok/s, Luong general no feeding, fp32", mine("luong", "general", False, "32"), peer_tput(everyone), 1.5)
    add("train tok/s, Luong general + feeding, bf16", mine("luong", "general", True, "bf16"), peer_tput(everyone), 2.5)

    # decoding: our equal-budget model timed like the peers' (decode_speed.py), else the throughput run's
    # 320-update Luong general model (a barely trained model: its output lengths differ from a trained one's)
    def fastest_decode(section, key):
        found = {n: p[section][key] for n, p in peers.items() if p.get(section, {}).get(key)}
        if not found:
            return (None, None, None)
        name, result = max(found.items(), key=lambda kv: kv[1]["sents_per_s"])
        return (name, result["sents_per_s"], policy(peers[name][section]))  # recorded per decode run

    decoded = load(work / "ours" / "decode.json")
    decoded_int8 = load(work / "ours" / "decode_int8.json")
    for key, label in (("greedy", "greedy"), ("beam5", "beam 5")):
        best = fastest_decode("decode", key)
        if key in decoded:
            speed, speed_policy = decoded[key]["sents_per_s"], policy(decoded[key], "default")
            add(f"decode sent/s, {label} (equal-budget models)", speed, best, 2.0, mine_policy=speed_policy)
        else:
            add(
                f"decode sent/s, {label} (320-update model)",
                mine("luong", "general", True, "32", f"{key}_sents_per_s"),
                best,
                2.0,
            )
        ours8 = decoded_int8.get(f"{key}_int8")
        if ours8:  # OpenNMT-py 3.5.1's -precision int8 decodes in fp32; onmt_int8.py quantises as it intends
            speed, speed_policy = ours8["sents_per_s"], policy(ours8, "default")
            add(f"decode sent/s, {label}, ours int8 vs peers as shipped", speed, best, 2.0, mine_policy=speed_policy)
            best8 = fastest_decode("decode_int8", key)
            add(f"decode sent/s, {label}, int8 both (peer's flag fixed)", speed, best8, 2.0, mine_policy=speed_policy)
    # training peak RSS, like for like: our process before it decodes vs OpenNMT-py's training process
    for attention, peer in (("general", "onmt_general"), ("additive", "onmt_mlp")):
        theirs = peers.get(peer, {}).get("tput", {}).get("peak_rss_mb")
        ours_rss = mine("luong", attention, True, "32", "train_peak_rss_mb")
        add(f"peak RSS MB in training, {attention} + feeding, fp32", ours_rss, (peer, theirs, None), 0.5, True)
    print("\n".join(lines))
    if ours:
        rates = ours["gemm_gflops"]
        print(
            f"\nGEMM GFLOP/s measured in this run: fp32 {rates['fp32_2048']:.0f}, bf16 {rates['bf16_2048']:.0f}; "
            "training model-FLOP rate as a share of each:"
        )
        for r in ours["rows"]:
            print(
                f"  {r['flow']} {r['attention']} feed={r['input_feed']} {r['precision']}: "
                f"{100 * r['share_fp32_gemm']:.0f}% of fp32, {100 * r['share_bf16_gemm']:.0f}% of bf16"
            )
    for key, name in (("greedy", "beam1"), ("beam5", "beam5")):
        for section, suffix in (("decode", ""), ("decode_int8", "_int8")):
            theirs = {n: p[section][key]["bleu"] for n, p in peers.items() if p.get(section, {}).get(key)}
            ours_bleu = load(work / "ours" / f"bleu_{name}{suffix}.json").get("bleu")
            if theirs or ours_bleu:
                weights = "int8" if suffix else "fp32"
                print(f"BLEU (harness way, {key}, alpha 0, {weights}), same budget: ours {ours_bleu}; peers {theirs}")
    tuned = load(work / "ours" / "bleu_beam5_alpha1.0.json").get("bleu")
    if tuned is not None:
        speed = load(work / "ours" / "decode_alpha.json").get("beam5_alpha1.0", {}).get("sents_per_s", 0)
        print(f"ours, beam 5 with alpha 1.0 (chosen on dev): BLEU {tuned}, {speed:.0f} sent/s")


if __name__ == "__main__":
    main()
