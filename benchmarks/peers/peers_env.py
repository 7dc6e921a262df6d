"""Run the peer harness with the caller's OpenMP wait policy, so peers and ours share one environment.

    python benchmarks/peers/peers_env.py tput|budget|decode|decode_int8 SYSTEM [MINUTES]

The harness (``../shared/tools/peers/scripts/peers.py``, PEERS_HARNESS) starts every peer with
``OMP_WAIT_POLICY=PASSIVE``: OpenMP threads then sleep as soon as a parallel region ends and
each of the thousands of regions per update pays a wake-up. Against libgomp's default it cost
OpenNMT-py 11-27% of its speed on these machines (training 22-24%, greedy decoding 27%, beam 11%)
and us 15-29%, so peers and ours must run under the same policy. This wrapper imports the
harness unchanged, sets its environment's policy to the caller's (unset = libgomp's default,
what a user gets) and records it with each result, then runs the harness's command.

``decode_int8`` (OpenNMT-py only) runs the harness's decoding through benchmarks/peers/onmt_int8.py,
OpenNMT-py with int8 weights as its ``-precision int8`` means to (in 3.5.1 that flag does
nothing), and saves it as ``decode_int8``; its outputs and logs get an ``_int8`` suffix and the
fp32 ones are left in place.
"""

import os
import sys
from contextlib import contextmanager
from pathlib import Path

POLICY_KEY = "OMP_WAIT_POLICY"
ONMT_INT8 = Path(__file__).resolve().parent / "onmt_int8.py"


@contextmanager
def int8_decoding(peers, system: str):
    """The harness's decode() with OpenNMT-py quantised, its files renamed ``*_int8`` afterwards."""
    if peers.SYSTEMS.get(system) != "onmt":
        raise SystemExit(f"decode_int8 is for the OpenNMT-py systems (onmt_*), not {system!r}")
    work = Path(peers.R)
    files = [
        work / d / f"{system}_{m}{e}"
        for m in ("greedy", "beam5")
        for d, e in (("outputs", ".txt"), ("logs", ".log"), ("logs", ".time"))
    ]
    stash = {f: f.with_name(f.name + ".fp32") for f in files if f.exists()}
    for f, aside in stash.items():
        f.rename(aside)
    launch, save = peers.launch, peers.save

    def launch_int8(cmd, log, timef):
        if cmd[0].endswith("onmt_translate"):
            cmd = [str(Path(cmd[0]).with_name("python")), str(ONMT_INT8), *cmd[1:]]
        return launch(cmd, log, timef)

    peers.launch = launch_int8
    peers.save = lambda system, key, value: save(system, f"{key}_int8" if key == "decode" else key, value)
    peers.ENV["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # what launch() sets for onmt_* commands
    try:
        yield
    finally:
        for f in files:
            if f.exists():
                f.rename(f.with_name(f"{f.stem}_int8{f.suffix}"))
        for f, aside in stash.items():
            aside.rename(f)


def main() -> None:
    if len(sys.argv) < 3 or (sys.argv[1] == "budget" and len(sys.argv) < 4):
        raise SystemExit(
            "usage: python benchmarks/peers/peers_env.py tput|budget|decode|decode_int8 SYSTEM [MINUTES for budget]"
        )
    work = Path(os.environ.get("PEERS_WORK", "peers-work"))
    if not (work / "data" / "tok" / "train.en").is_file():
        raise SystemExit(f"no tokenised peer data in {work}/data/tok: set PEERS_WORK, or run run_peers.sh data first")
    harness = Path(os.environ.get("PEERS_HARNESS", Path(__file__).resolve().parents[2] / "../shared/tools/peers"))
    sys.path.insert(0, str(harness / "scripts"))
    import peers  # the harness module; reads PEERS_WORK

    command, system, *rest = sys.argv[1:]
    if system not in peers.SYSTEMS:
        raise SystemExit(f"unknown peer {system!r}: choose one of {sorted(peers.SYSTEMS)}")
    if command.startswith("decode") and "budget" not in peers.load(system):
        raise SystemExit(f"no equal-budget {system} model in {work}/results: run compare_peers.sh bleu first")
    policy = os.environ.get(POLICY_KEY)
    if policy is None:
        peers.ENV.pop(POLICY_KEY, None)
    else:
        peers.ENV[POLICY_KEY] = policy
    save = peers.save

    def save_with_policy(system: str, key: str, value: dict) -> None:
        save(system, key, {**value, "omp_wait_policy": policy or "default"})

    peers.save = save_with_policy
    if command == "tput":
        peers.tput(system)
    elif command == "budget":
        peers.budget(system, float(rest[0]))
    elif command == "decode":
        peers.decode(system)
    elif command == "decode_int8":
        with int8_decoding(peers, system):
            peers.decode(system)
    else:
        raise SystemExit(f"unknown command {command!r}: choose tput, budget, decode or decode_int8")


if __name__ == "__main__":
    main()
