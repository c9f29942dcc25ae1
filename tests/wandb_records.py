"""Read a W&B offline run file (``offline-run-*/run-*.wandb``) in tests: its records as protobufs.

The file is a LevelDB-style log (7-byte header, 32 KiB blocks, records split into FULL / FIRST /
MIDDLE / LAST fragments with a 7-byte header each) of ``wandb_internal_pb2.Record`` messages.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768


def records(path: str | Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B", "not a W&B run file"
    pos, out, buf = 7, [], b""
    while pos + 7 <= len(raw):
        left = BLOCK - (pos % BLOCK)
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        data = raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            out.append(data)
        elif kind == 2:
            buf = data
        elif kind == 3:
            buf += data
        elif kind == 4:
            out.append(buf + data)
            buf = b""
    result = []
    for data in out:
        rec = pb.Record()
        rec.ParseFromString(data)
        result.append(rec)
    return result


def _key(item: Any) -> str:
    return ".".join(item.nested_key) if len(item.nested_key) else item.key


def summary(path: str | Path) -> dict[str, Any]:
    """The run's run name, config, every history key's last value and the uploaded files."""
    out: dict[str, Any] = {"name": None, "config": {}, "history": {}, "files": []}
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["name"] = rec.run.display_name
            out["config"].update({_key(u): json.loads(u.value_json) for u in rec.run.config.update})
        elif kind == "config":
            out["config"].update({_key(u): json.loads(u.value_json) for u in rec.config.update})
        elif kind == "history":
            out["history"].update({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "files":
            out["files"] += [f.path for f in rec.files.files]
    return out
