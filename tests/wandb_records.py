"""Read an offline W&B run back from its ``run-<id>.wandb`` file (wandb 0.31 has no public reader).

The file is LevelDB-log framed: a 7-byte header (``:W&B``, 0xBEE1, version 0), then 32 KiB
blocks of chunks, each with a ``<IHB`` header (crc32, length, type FULL/FIRST/MIDDLE/LAST);
the joined chunks are protobuf ``Record`` messages of ``wandb.proto.wandb_internal_pb2``.
"""

import json
import struct
import time
from pathlib import Path

BLOCK, HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    out, pending, pos = [], b"", HEADER
    while pos + 7 <= len(data):
        left_in_block = BLOCK - (pos % BLOCK)
        if left_in_block < 7:  # block trailer padding
            pos += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind in (FULL, FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def read_run(run_dir: Path, timeout: float = 15.0) -> dict:
    """History keys, config, summary, tags, group and job type of the single offline run under ``run_dir``."""
    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    deadline = time.time() + timeout
    while True:  # finish() may return before the file is complete: wait for the exit record
        recs = records(files[0])
        if any(r.WhichOneof("record_type") == "exit" for r in recs) or time.time() > deadline:
            break
        time.sleep(0.2)
    run = {"history": {}, "config": {}, "summary": {}, "tags": [], "group": None, "job_type": None}
    for r in recs:
        kind = r.WhichOneof("record_type")
        if kind == "history":
            for item in r.history.item:
                key = item.key or "/".join(item.nested_key)
                run["history"].setdefault(key, []).append(json.loads(item.value_json))
        elif kind == "config":
            for item in r.config.update:
                run["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in r.summary.update:
                run["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "run":
            for item in r.run.config.update:  # the config given to wandb.init
                run["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
            run["tags"] = list(r.run.tags) or run["tags"]
            run["group"] = r.run.run_group or run["group"]
            run["job_type"] = r.run.job_type or run["job_type"]
    run["files"] = sorted(p.relative_to(files[0].parent).as_posix() for p in files[0].parent.rglob("*") if p.is_file())
    return run
