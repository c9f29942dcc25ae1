"""Callbacks that turn predict outputs into results: metrics per (sampler, steps) row and files.

:class:`ResultsWriter` updates one :class:`TransitionMetrics` per row as work items finish,
computes them at the end of predict (summing counts across processes) and, on rank 0, writes
``metrics.json`` (a list of rows) and ``metrics.csv`` into ``output_dir`` (default: the trainer's
``default_root_dir``).  Files are written atomically.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from dllm_lit.metrics.transition import METRIC_KEYS, TransitionMetrics

__all__ = ["ResultsWriter", "atomic_write_text"]


def atomic_write_text(path: Path, text: str) -> None:
    """Write text to a temporary file beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _row_key(sampler: str, steps: int | None) -> str:
    return f"{sampler}@{'ar' if steps is None else steps}"


class ResultsWriter(Callback):
    """Accumulate transition metrics per (sampler, steps) and write metrics.json / metrics.csv."""

    def __init__(self, output_dir: str | None = None) -> None:
        self.output_dir = output_dir
        self.metrics: dict[str, TransitionMetrics] = {}
        self.rows: list[dict[str, Any]] = []

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        chain = pl_module.chain
        self.metrics = {}
        self._order: list[tuple[str, int | None]] = list(pl_module.runs())
        for sampler, steps in self._order:
            self.metrics[_row_key(sampler, steps)] = TransitionMetrics(chain)

    def on_predict_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Name the row being sampled in the progress bar, e.g. ``mdlm steps=64``."""
        bar = getattr(trainer.progress_bar_callback, "predict_progress_bar", None)
        if bar is not None and isinstance(batch, dict):
            steps = batch.get("steps")
            bar.set_description(f"{batch.get('sampler', 'predict')} " + ("AR" if steps is None else f"steps={steps}"))

    def on_predict_batch_end(self, trainer, pl_module, outputs: dict[str, Any], batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.metrics[_row_key(outputs["sampler"], outputs["steps"])].update(outputs["samples"])

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seed = int(trainer.datamodule.seed) if trainer.datamodule is not None else None
        rows = []
        for sampler, steps in self._order:
            values = self.metrics[_row_key(sampler, steps)].compute()  # syncs counts across processes
            rows.append({"sampler": sampler, "steps": steps, "seed": seed, **{k: values[k] for k in METRIC_KEYS}})
        self.rows = rows
        if trainer.is_global_zero:
            out = Path(self.output_dir or trainer.default_root_dir)
            self.write(rows, out)
            self.log_rows(trainer, rows)

    @staticmethod
    def log_rows(trainer: L.Trainer, rows: list[dict[str, Any]]) -> None:
        """Send every row to the trainer's loggers (W&B: one metric series per sampler plus a table)."""
        for logger in trainer.loggers:
            for r in rows:
                numeric = {f"{r['sampler']}/{k}": v for k, v in r.items() if isinstance(v, float)}
                logger.log_metrics(numeric, step=0 if r["steps"] is None else int(r["steps"]))
            if hasattr(logger, "log_table") and rows:
                cols = list(rows[0].keys())
                logger.log_table(key="results", columns=cols, data=[[r[c] for c in cols] for r in rows])

    @staticmethod
    def write(rows: list[dict[str, Any]], out: Path) -> None:
        atomic_write_text(out / "metrics.json", json.dumps(rows, indent=2) + "\n")
        buf = io.StringIO()
        fields = list(rows[0].keys()) if rows else ["sampler", "steps", "seed", *METRIC_KEYS]
        w = csv.DictWriter(buf, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        atomic_write_text(out / "metrics.csv", buf.getvalue())
