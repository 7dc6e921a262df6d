"""BLEU the peer harness's way: lowercase, ``\\w+|[^\\w\\s]`` tokens on both sides, sacreBLEU ``--tokenize none``.

    python benchmarks/peers/harness_bleu.py HYPOTHESES [--ref $S2S_DATA_ROOT/multi30k/test_2016_flickr.en.gz]

Our outputs are cased, detokenised text; the peers' are the harness's tokenised lowercase text.
Scoring both this way makes the numbers comparable (and only comparable within the harness).
"""

import argparse
import gzip
import re
from pathlib import Path

import sacrebleu

TOKENS = re.compile(r"\w+|[^\w\s]")


def harness_tokens(line: str) -> str:
    return " ".join(TOKENS.findall(line.strip().lower()))


def read(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def main() -> None:
    from seq2seq_attn.data.corpora import data_root

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("hypotheses")
    parser.add_argument("--ref", default=str(Path(data_root(None)) / "multi30k" / "test_2016_flickr.en.gz"))
    args = parser.parse_args()
    hyps, refs = read(args.hypotheses), read(args.ref)
    if len(hyps) != len(refs):
        raise SystemExit(f"{args.hypotheses} has {len(hyps)} lines, {args.ref} has {len(refs)}")
    score = sacrebleu.corpus_bleu(
        [harness_tokens(h) for h in hyps], [[harness_tokens(r) for r in refs]], tokenize="none"
    )
    print(f"{score.score:.2f}")


if __name__ == "__main__":
    main()
