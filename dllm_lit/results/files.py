"""The result files of a run and their formats (an exporter: rows in, files out, each written atomically).

- ``metrics.json`` - ``{"meta": {...}, "rows": [...]}`` (format ``dllm_lit.metrics`` version 2;
  :func:`load_metrics` also reads the version-1 bare list);
- ``metrics.csv`` - the same rows, intervals as ``<key>_ci_low`` / ``<key>_ci_high`` columns, settings as JSON;
- ``samples.pt`` - {"format": "dllm_lit.samples", "version": 1, "rows": [{sampler, label, steps, seed,
  samples: uint8/int16 [N, T]}]};
- ``samples.txt`` - a few decoded samples per row;
- ``seals.json`` - per committed row, SHA-256 digests of its values (as ``metrics.json`` holds them) and of its
  samples (dtype, shape, bytes), written before ``metrics.json``: a resume keeps a row only when both still
  match (:func:`row_seals`).  An unkeyed digest: it detects a changed file (integrity), not who changed it.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import torch

from dllm_lit.util.atomic import atomic_torch_save, atomic_write_text
from dllm_lit.util.hashing import sha256_tensors, sha256_text

__all__ = ["FIGURE_FORMATS", "METRICS_FORMAT", "METRICS_VERSION", "RESULT_FILES", "ROW_HEAD", "SAMPLES_FORMAT",
           "SEALS_FORMAT", "load_metrics", "read_seals", "row_seals", "seal_holds", "row_title", "write_metrics", "write_samples",
           "write_seals"]

SAMPLES_FORMAT = "dllm_lit.samples"
SEALS_FORMAT = "dllm_lit.seals"
METRICS_FORMAT = "dllm_lit.metrics"
METRICS_VERSION = 2
FIGURE_FORMATS = ("png", "pdf", "svg")
#: row fields the writer itself adds around the registry's keys
ROW_HEAD = ("sampler", "label", "steps", "seed", "nfe", "nfe_std", "settings")
#: the files a run writes beside its figures
RESULT_FILES = ("metrics.json", "metrics.csv", "samples.pt", "samples.txt", "seals.json")


def load_metrics(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(meta, rows)`` of a ``metrics.json`` (a directory or the file); version-1 files (a bare list) give ``meta = {}``."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.json"
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return {}, data
    if not isinstance(data, dict) or "rows" not in data:
        raise ValueError(f"{path} is not a dllm_lit metrics.json (no rows)")
    return dict(data.get("meta") or {}), list(data["rows"])


def write_metrics(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any] | None = None,
                  default_keys: tuple[str, ...] = ()) -> None:
    """metrics.json ({"meta", "rows"}) and metrics.csv (intervals split into two columns, settings as JSON);
    ``default_keys`` head the CSV of a run without rows (after :data:`ROW_HEAD`)."""
    atomic_write_text(out / "metrics.json", json.dumps({"meta": meta or {}, "rows": rows}, indent=2) + "\n")
    flat_rows = []
    for r in rows:
        flat: dict[str, Any] = {}
        for k, v in r.items():
            if k.endswith("_ci"):
                flat[f"{k}_low"], flat[f"{k}_high"] = (v if v is not None else ("", ""))
            elif isinstance(v, (dict, list)):
                flat[k] = json.dumps(v, sort_keys=True)
            else:
                flat[k] = "" if v is None else v
        flat_rows.append(flat)
    fields: list[str] = []
    for fr in flat_rows:
        fields += [k for k in fr if k not in fields]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields or [*ROW_HEAD, *default_keys], restval="")
    w.writeheader()
    w.writerows(flat_rows)
    atomic_write_text(out / "metrics.csv", buf.getvalue())


def row_title(row: dict[str, Any]) -> str:
    """``<label> steps=<s>``, or ``<label> AR (exact chain samples)`` for a row without steps."""
    return f"{row['label']} " + ("AR (exact chain samples)" if row["steps"] is None else f"steps={row['steps']}")


def write_samples(rows: list[dict[str, Any]], samples: list[torch.Tensor | None], out: Path, save: bool = True,
                  decoder: Any = None, num_text_examples: int = 0) -> None:
    """samples.pt (when ``save``) and samples.txt (the first ``num_text_examples`` of each row, when a decoder is given)."""
    if save:
        # the row fields pass through JSON, as rows kept by a resume do: the pickle then shares no object a
        # fresh row would (a label that is the sampler's name), so the bytes are the same after a resume
        heads = json.loads(json.dumps([{k: r[k] for k in ("sampler", "label", "steps", "seed")} for r in rows]))
        payload = {"format": SAMPLES_FORMAT, "version": 1,
                   "rows": [{**head, "samples": x} for head, x in zip(heads, samples)]}
        atomic_torch_save(payload, out / "samples.pt")
    if decoder is not None and num_text_examples:
        parts = []
        for r, x in zip(rows, samples):
            if x is None:
                parts.append(f"=== {row_title(r)} === (samples not kept)")
                continue
            texts = decoder.decode_batch(x[:num_text_examples].long())
            parts.append(f"=== {row_title(r)} ===\n" + "\n".join(f"[{i}] {t}" for i, t in enumerate(texts)))
        atomic_write_text(out / "samples.txt", "\n\n".join(parts) + "\n")


def _seal_key(row: dict[str, Any]) -> str:
    return f"{row['label']}@{row['steps']}"


def row_seals(row: dict[str, Any], samples: torch.Tensor | None) -> dict[str, str | None]:
    """``{"values": <SHA-256 of the row as metrics.json stores it>, "samples": <SHA-256 of its samples> or None}``."""
    as_stored = json.dumps(json.loads(json.dumps(row)), sort_keys=True, separators=(",", ":"))  # NaN stays NaN
    return {"values": sha256_text(as_stored),
            "samples": sha256_tensors([("samples", samples)]) if samples is not None else None}


def write_seals(rows: list[dict[str, Any]], samples: list[torch.Tensor | None], out: Path) -> None:
    """``seals.json``: the seals of every committed row (samples sealed only when they are saved)."""
    seals = {_seal_key(r): row_seals(r, x) for r, x in zip(rows, samples)}
    atomic_write_text(out / "seals.json", json.dumps({"format": SEALS_FORMAT, "version": 1, "rows": seals},
                                                     indent=1, sort_keys=True) + "\n")


def read_seals(out: Path) -> dict[str, dict[str, Any]]:
    """The seals in ``out/seals.json`` by row (``{}`` when the file is missing or unreadable: no row is sealed)."""
    try:
        data = json.loads((Path(out) / "seals.json").read_text())
        return {str(k): dict(v) for k, v in data["rows"].items()} if data.get("format") == SEALS_FORMAT else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def seal_holds(seals: dict[str, dict[str, Any]], row: dict[str, Any], samples: torch.Tensor | None) -> bool:
    """Whether ``row`` (and its samples, when given) are what was sealed when the row was committed."""
    found, now = seals.get(_seal_key(row)) or {}, row_seals(row, samples)
    return found.get("values") == now["values"] and (samples is None or found.get("samples") == now["samples"])
