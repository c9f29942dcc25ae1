"""What the command line prints: quiet by default, informative where it matters.

:func:`configure` silences Lightning's start-up chatter (accelerator availability, the logger
advertisement, known third-party deprecation warnings) and routes dllm_lit's own progress lines
(``logging.getLogger("dllm_lit")``: chain builds, where results went) to stderr as ``[dllm_lit] ...``.
Set ``DLLM_LIT_VERBOSE=1`` to keep Lightning's messages.  :func:`summary` formats the end-of-run table.
"""
from __future__ import annotations

import logging
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["configure", "summary", "log"]

log = logging.getLogger("dllm_lit")

#: Lightning / PyTorch messages that say nothing about a dllm_lit run
_QUIET_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed",
                  "lightning.pytorch.accelerators.cuda", "lightning.fabric.utilities.distributed",
                  "lightning.pytorch.trainer.connectors.signal_connector")  # "Received SIGTERM": the run says it
_QUIET_WARNINGS = (r".*isinstance\(treespec, LeafSpec\).*", r".*does not have many workers.*",
                   r".*predict_dataloader.*num_workers.*", r".*LightningCLI's args parameter is intended.*")


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _one_line_warning(message: Any, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """dllm_lit's own warnings as one line (``warning: <message>``); others as the format found at configure."""
    if os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
        return f"warning: {message}\n"
    return _one_line_warning.previous(message, category, filename, lineno, line)  # type: ignore[attr-defined]


def configure() -> None:
    """Quiet Lightning, show dllm_lit's own progress lines and warnings as one line each (idempotent)."""
    if warnings.formatwarning is not _one_line_warning:
        _one_line_warning.previous = warnings.formatwarning  # type: ignore[attr-defined]
        warnings.formatwarning = _one_line_warning
    if not os.environ.get("DLLM_LIT_VERBOSE"):
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        for pattern in _QUIET_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
    if not any(getattr(h, "_dllm_lit", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[dllm_lit] %(message)s"))
        handler._dllm_lit = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def summary(rows: Sequence[dict[str, Any]], keys: Sequence[str] = ("kl", "nll", "entropy", "div3")) -> str:
    """A plain-text table: one line per row (sampler, steps, then ``keys`` that any row has)."""
    keys = [k for k in keys if any(k in r for r in rows)]
    header = ["sampler", "steps", *keys]
    table = [[_cell(r.get("sampler")), "AR" if r.get("steps") is None else str(r.get("steps")),
              *(_cell(r.get(k)) for k in keys)] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(t, widths)) for t in table]
    return "\n".join(lines)
