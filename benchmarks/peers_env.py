"""Run the peer harness with the caller's OpenMP wait policy, so peers and ours share one environment.

    python benchmarks/peers_env.py tput|budget|decode SYSTEM [MINUTES]

The harness (``../shared/tools/peers/scripts/peers.py``, PEERS_HARNESS) starts every peer with
``OMP_WAIT_POLICY=PASSIVE``: OpenMP threads then sleep as soon as a parallel region ends and
each of the thousands of regions per update pays a wake-up. Against libgomp's default it cost
OpenNMT-py 11-27% of its speed on these machines (training 22-24%, greedy decoding 27%, beam 11%)
and us 15-29%, so peers and ours must run under the same policy. This wrapper imports the
harness unchanged, sets its environment's policy to the caller's (unset = libgomp's default,
what a user gets) and records it with each result, then runs the harness's command.
"""

import os
import sys
from pathlib import Path

POLICY_KEY = "OMP_WAIT_POLICY"


def main() -> None:
    if len(sys.argv) < 3 or (sys.argv[1] == "budget" and len(sys.argv) < 4):
        raise SystemExit("usage: python benchmarks/peers_env.py tput|budget|decode SYSTEM [MINUTES for budget]")
    work = Path(os.environ.get("PEERS_WORK", "peers-work"))
    if not (work / "data" / "tok" / "train.en").is_file():
        raise SystemExit(f"no tokenised peer data in {work}/data/tok: set PEERS_WORK, or run run_peers.sh data first")
    harness = Path(os.environ.get("PEERS_HARNESS", Path(__file__).resolve().parents[1] / "../shared/tools/peers"))
    sys.path.insert(0, str(harness / "scripts"))
    import peers  # the harness module; reads PEERS_WORK

    policy = os.environ.get(POLICY_KEY)
    if policy is None:
        peers.ENV.pop(POLICY_KEY, None)
    else:
        peers.ENV[POLICY_KEY] = policy
    save = peers.save

    def save_with_policy(system: str, key: str, value: dict) -> None:
        save(system, key, {**value, "omp_wait_policy": policy or "default"})

    peers.save = save_with_policy
    command, system, *rest = sys.argv[1:]
    if command == "tput":
        peers.tput(system)
    elif command == "budget":
        peers.budget(system, float(rest[0]))
    elif command == "decode":
        peers.decode(system)
    else:
        raise SystemExit(f"unknown command {command!r}: choose tput, budget or decode")


if __name__ == "__main__":
    main()
