"""The rows of a run sent to Lightning's loggers (an exporter): one row's metrics as it is committed, and at the
end the results table, the sweep metric, the figures and, for W&B, the result files; and the row being sampled
as the progress bar's description."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["describe_progress", "log_complete", "log_row", "log_rows", "log_run_config", "numeric"]


def describe_progress(callback: Any, text: str) -> None:
    """Show ``text`` (e.g. ``row 2/9 mdlm steps=64``) as the predict progress bar's description (TQDM or Rich)."""
    bar = getattr(callback, "predict_progress_bar", None)
    if hasattr(bar, "set_description"):  # TQDMProgressBar
        bar.set_description(text)
    task = getattr(callback, "predict_progress_bar_id", None)
    progress = getattr(callback, "progress", None)
    if task is not None and progress is not None:  # RichProgressBar
        progress.update(task, description=text)


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """The row's finite numbers (without ``seed``), as floats."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("seed",)
            and not (isinstance(v, float) and math.isnan(v))}


def log_run_config(loggers: Sequence[Any], meta: dict[str, Any], settings: dict[str, Any]) -> None:
    """The run's metadata and each row's settings (``{row key: settings}``), as hyperparameters."""
    for logger in loggers:
        logger.log_hyperparams({"run": meta, "rows": settings})


def log_complete(loggers: Sequence[Any], meta: dict[str, Any]) -> None:
    """The run's metadata again, now ``complete`` (the config logged at set-up said ``complete: false``)."""
    for logger in loggers:
        logger.log_hyperparams({"run": {**meta, "complete": True}})


def log_row(loggers: Sequence[Any], index: int, row: dict[str, Any]) -> None:
    """One row as metrics ``<label>/<key>`` (W&B step = the row's index in the plan, so steps stay monotone)."""
    values = {f"{row['label']}/{k}": v for k, v in numeric(row).items()}
    if row["steps"] is not None:
        values[f"{row['label']}/steps"] = float(row["steps"])
    for logger in loggers:
        logger.log_metrics(values, step=index)


def _table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns (intervals as ``<key>_low`` / ``<key>_high``, as in metrics.csv) and cells of the results table."""
    cols = []
    for c in rows[0].keys():
        cols += [f"{c[:-3]}_low", f"{c[:-3]}_high"] if c.endswith("_ci") else [c]

    def cell(r: dict[str, Any], c: str) -> Any:
        for end, i in (("_low", 0), ("_high", 1)):
            if c.endswith(end) and f"{c[:-len(end)]}_ci" in r:
                ci = r[f"{c[:-len(end)]}_ci"]
                return ci[i] if isinstance(ci, (list, tuple)) else None
        v = r.get(c)
        return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v

    return cols, [[cell(r, c) for c in cols] for r in rows]


def log_rows(loggers: Sequence[Any], rows: list[dict[str, Any]], figures: Sequence[Path] = (),
             files: Sequence[Path] = ()) -> None:
    """The results table, the sweep metric, the figures and the result files, to every logger.

    The sweep metric: the unprefixed keys (``kl``, ``nll``, ...) of the run's last non-reference row,
    so a W&B sweep can optimise ``kl`` over points that each run one (sampler, steps).
    """
    if not rows:
        return
    main = next((r for r in reversed(rows) if r["steps"] is not None or r["label"] != "ar"), rows[-1])
    cols, data = _table(rows)
    for logger in loggers:
        logger.log_metrics(numeric(main), step=len(rows))
        if hasattr(logger, "log_table"):
            logger.log_table(key="results", columns=cols, data=data)
        if figures and hasattr(logger, "log_image"):
            for p in (p for p in figures if Path(p).suffix == ".png"):
                logger.log_image(key=f"figures/{Path(p).stem}", images=[str(p)])
        experiment = getattr(logger, "experiment", None)
        if type(logger).__name__ == "WandbLogger" and hasattr(experiment, "save"):
            for p in [*files, *figures]:
                if Path(p).exists():
                    experiment.save(str(p), base_path=str(Path(p).parent if Path(p).parent.name != "figures"
                                                           else Path(p).parent.parent), policy="now")
