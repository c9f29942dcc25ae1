"""A run's output folder as a store of rows: what the run is (identity), which rows on disk it keeps
(resume), and commits written atomically.

**Identity.**  A kept row must come from the same run: N, T, seed, the chain's fingerprint and the
metric options (:func:`run_key`; the metric options come from the registry, each enabled metric's
options dataclass included, so a configurable metric is part of it without any list kept by hand).
Within the run, a row is kept when its label, steps and settings (sampler options, denoiser, code
digest) are those of the plan's row and its samples are on disk.

**Commit.**  Samples first, then their seals (``seals.json``: SHA-256 of each row's values and samples), then
``metrics.json`` (the commit record), each file atomically: a row is on disk exactly when ``metrics.json``
lists it, and it is kept on resume only while its seal holds (a changed value or sample is computed again).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from dllm_lit.engine.plan import RunPlan, jsonable
from dllm_lit.results.files import (FIGURE_FORMATS, METRICS_FORMAT, METRICS_VERSION, RESULT_FILES, load_metrics,
                                    read_seals, seal_holds, write_metrics, write_samples, write_seals)
from dllm_lit.results.output_folder import lock_output_folder, remove_leftovers, unlock_output_folder

__all__ = ["RunStore", "package_info", "run_key", "run_meta"]

#: a kept row: (its metrics.json row, its samples [N, T] or None when samples are not saved)
Kept = tuple[dict[str, Any], "torch.Tensor | None"]


def run_key(plan: RunPlan, chain: Any, metric_options: dict[str, Any]) -> dict[str, Any]:
    """What every row of the run shares and a kept row must match: N, T, seed, chain, metric options."""
    return {"num_sequences": int(plan.num_sequences), "seq_len": int(plan.seq_len), "seed": int(plan.seed),
            "chain": chain.fingerprint if chain is not None else None, "metric_options": metric_options}


def run_meta(key: dict[str, Any], chain: Any, plan: RunPlan, labels: list[str], intervals: dict[str, Any] | None,
             source: Any, package: dict[str, Any], complete: bool) -> dict[str, Any]:
    """The ``meta`` block of ``metrics.json``."""
    return {"format": METRICS_FORMAT, "version": METRICS_VERSION, "complete": complete,
            "num_sequences": key["num_sequences"], "seq_len": key["seq_len"], "seed": key["seed"],
            "chain": {"fingerprint": key["chain"], "vocab_size": getattr(chain, "vocab_size", None),
                      "source": jsonable(source)},
            "metric_options": key["metric_options"], "intervals": intervals,
            "rows": [{"label": lab, "steps": r.steps, "reference": r.reference} for lab, r in zip(labels, plan.rows)],
            "package": package}


def package_info() -> dict[str, Any]:
    """The package's name, version and git commit (``-dirty`` with uncommitted changes), for the run metadata."""
    try:
        from importlib.metadata import version

        ver = version("dllm_lit")
    except Exception:
        ver = None
    commit = None
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            commit = out.stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                   capture_output=True, text=True, timeout=5)
            if dirty.returncode == 0 and dirty.stdout.strip():
                commit += "-dirty"
    except Exception:
        pass
    return {"name": "dllm_lit", "version": ver, "commit": commit}


def _without_code(settings: Any) -> Any:
    """A row's settings without the source hash (to tell a code change from a settings change)."""
    return {k: v for k, v in settings.items() if k != "code"} if isinstance(settings, dict) else settings


class RunStore:
    """The output folder of one run: claimed (checked writable, locked, a killed run's temporary files removed),
    read for rows to keep, cleared of another run's files, and written commit by commit."""

    def __init__(self, out: Path, lock: Any = None) -> None:
        self.out, self._lock = Path(out), lock

    @classmethod
    def claim(cls, out: str | Path, writes: bool = True, field: str = "results.output_dir") -> "RunStore":
        """Check ``out`` is writable; lock it and remove leftovers when this process ``writes`` (rank zero).
        ``field`` is the option the folder came from (named in the error)."""
        out = Path(out)
        problem = None
        if out.exists() and not out.is_dir():
            raise ValueError(f"{field} {str(out)!r} is a file, not a folder: give another {field}")
        try:
            out.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".write-check.", dir=out)
            os.close(fd)
            os.unlink(tmp)
        except OSError as exc:
            problem = exc.strerror or str(exc)
        if problem is not None:  # raised outside the handler: the message is the one line the CLI shows
            raise ValueError(f"{field} {str(out)!r} is not writable ({problem})")
        if not writes:
            return cls(out)
        store = cls(out, lock_output_folder(out))
        remove_leftovers(out)
        return store

    def release(self) -> None:
        """Release the folder's lock (at the end of the run, or when it fails)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            unlock_output_folder(lock)

    def __getstate__(self) -> dict[str, Any]:
        return {"out": self.out, "_lock": None}  # an open lock file stays with the process that took it

    # ------------------------------------------------------------------ resume
    def load_previous(self, plan: RunPlan, labels: list[str], settings: list[dict[str, Any]], key: dict[str, Any],
                      with_samples: bool) -> tuple[dict[int, Kept], dict[str, Any]]:
        """Rows already complete on disk for the same run and row settings, ``{plan row index: (row, samples)}``,
        and the interval methods recorded with them; anything else in the folder is removed (with a warning)."""
        path = self.out / "metrics.json"
        if not path.exists():
            self.clear(None)
            return {}, {}
        try:
            meta, rows = load_metrics(path)
        except (ValueError, json.JSONDecodeError) as exc:
            self.clear(f"its metrics.json could not be read ({exc})")
            return {}, {}
        same_run = meta.get("format") == METRICS_FORMAT and {
            "num_sequences": meta.get("num_sequences"), "seq_len": meta.get("seq_len"), "seed": meta.get("seed"),
            "chain": (meta.get("chain") or {}).get("fingerprint"), "metric_options": meta.get("metric_options")
        } == jsonable(key)
        if not same_run:
            self.clear("it holds another run's results (different N, T, seed, chain or metric options)")
            return {}, {}
        methods = (meta.get("intervals") or {}).get("per_key") or {}
        samples: dict[tuple[str, Any], torch.Tensor] = {}
        if with_samples:
            try:
                saved = torch.load(self.out / "samples.pt", weights_only=True)
                samples = {(r.get("label", r["sampler"]), r["steps"]): r["samples"] for r in saved["rows"]}
            except Exception:
                samples = {}
        by_id = {(r.get("label"), r.get("steps")): r for r in rows}
        seals = read_seals(self.out)
        kept, recoded, broken = {}, [], []
        for i, (label, plan_row, want) in enumerate(zip(labels, plan.rows, settings)):
            row = by_id.get((label, plan_row.steps))
            if row is not None and _without_code(row.get("settings")) == _without_code(want) \
                    and row["settings"].get("code") != want.get("code"):
                recoded.append(plan_row.key)
            if row is None or row.get("settings") != want:
                continue
            x = samples.get((label, plan_row.steps))
            if with_samples and (x is None or tuple(x.shape) != (plan.num_sequences, plan.seq_len)):
                continue
            if not seal_holds(seals, row, x if with_samples else None):
                broken.append(plan_row.key)
                continue
            kept[i] = (row, x)
        if recoded:
            warnings.warn(f"{self.out}: the code of the sampler or denoiser changed since row(s) {', '.join(recoded)} "
                          "were computed (settings[\"code\"]); they are computed again", stacklevel=2)
        if broken:
            warnings.warn(f"{self.out}: row(s) {', '.join(broken)} fail their seal (seals.json: metrics.json or "
                          "samples.pt changed since they were committed); they are computed again", stacklevel=2)
        stale = len(rows) - len(kept) - len(recoded) - len(broken)
        if stale > 0:
            warnings.warn(f"{self.out}: {stale} row(s) on disk are not part of this run or have other settings; "
                          "they are replaced", stacklevel=2)
        self.remove_figures()
        return kept, methods

    def clear(self, reason: str | None) -> None:
        """Remove the files a previous run left in the folder (with a warning naming them, when ``reason`` is given)."""
        found = [n for n in RESULT_FILES if (self.out / n).exists()]
        figs = self.remove_figures()
        for n in found:
            (self.out / n).unlink()
        if (found or figs) and reason is not None:
            warnings.warn(f"{self.out}: {reason}; removed {', '.join(found + [f'{figs} figure(s)'] if figs else found)}",
                          stacklevel=2)

    def remove_figures(self) -> int:
        """Delete ``figures/*.{png,pdf,svg}``; returns how many."""
        folder = self.out / "figures"
        count = 0
        if folder.is_dir():
            for p in folder.iterdir():
                if p.is_file() and p.suffix.lstrip(".") in FIGURE_FORMATS:
                    p.unlink()
                    count += 1
        return count

    # ------------------------------------------------------------------ commit
    def commit(self, rows: list[dict[str, Any]], samples: list[torch.Tensor | None], meta: dict[str, Any],
               save_samples: bool, decoder: Any = None, num_text_examples: int = 0,
               default_keys: tuple[str, ...] = ()) -> None:
        """Samples first (samples.pt, samples.txt), their seals (seals.json), then metrics.json and metrics.csv:
        the commit record."""
        write_samples(rows, samples, self.out, save=save_samples, decoder=decoder, num_text_examples=num_text_examples)
        write_seals(rows, [x if save_samples else None for x in samples], self.out)
        write_metrics(rows, self.out, meta=meta, default_keys=default_keys)
