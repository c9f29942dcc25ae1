"""What the command line prints: quiet by default, informative where it matters.

:func:`configure` silences Lightning's start-up chatter (accelerator availability, the logger
advertisement, known third-party deprecation warnings) and routes dllm_lit's own progress lines
(``logging.getLogger("dllm_lit")``: chain builds, where results went) to stderr as ``[dllm_lit] ...``.
Set ``DLLM_LIT_VERBOSE=1`` to keep Lightning's messages.  :func:`summary` formats the end-of-run table: the numbers README says to quote.
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
                   r".*predict_dataloader.*num_workers.*", r".*LightningCLI's args parameter is intended.*",
                   r".*Total length of `DataLoader` across ranks is zero.*")  # a resumed run with every row kept


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (not the one at configuration): a redirected or captured stderr
    receives the progress lines too."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # dllm_lit/, above util/


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
        handler = _StderrHandler()
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


def _num(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def _with_ci(row: dict[str, Any], key: str) -> str:
    ci = row.get(f"{key}_ci")
    return _num(row.get(key)) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else "")


#: longest sampler label printed (the full label is in metrics.json)
LABEL_WIDTH = 32

#: the columns of the end-of-run table: (header, cell of a row) - the numbers README says to quote
COLUMNS: tuple[tuple[str, Any], ...] = (
    ("sampler", lambda r: _label(r)),
    ("steps", lambda r: "-" if r.get("steps") is None else str(r["steps"])),
    ("NFE", lambda r: "-" if r.get("nfe") is None else f"{r['nfe']:.0f}" if r["nfe"] >= 100 else _num(r["nfe"])),
    ("seq KL certified (95%)", lambda r: _bracket(r)),
    ("seq KL upper [95% CI]", lambda r: _with_ci(r, "seq_kl_upper")),
    ("kl_excess [95% CI]", lambda r: _with_ci(r, "kl_excess")),
    ("kl", lambda r: _num(r.get("kl"))),
)

#: the line under the table: what the columns are and where the rest is
LEGEND = ("nats per token. Quote the certified sequence-KL bracket: each end a one-sided 95% bound (- where no bound\n"
          "holds: the upper end needs an order that ignores the tokens, N >= 32 and log q - log p not equal in every\n"
          "sequence); seq KL upper: its estimate; kl_excess: transition KL minus that of exact samples (an\n"
          "estimate); kl: the paper's plug-in KL, to compare rows of one run. All columns: metrics.csv, docs/metrics.md")


def _bracket(row: dict[str, Any]) -> str:
    """The certified bracket [seq_kl_bracket_lo, seq_kl_bracket_hi] (each end a one-sided 95% bound; - where an end
    has no bound); before those columns existed, the DV lower bound alone."""
    if "seq_kl_bracket_lo" not in row:
        return _num(_floor0((row.get("seq_kl_lower_ci") or [None])[0]))
    return f"[{_num(_floor0(row.get('seq_kl_bracket_lo')))}, {_num(row.get('seq_kl_bracket_hi'))}]"


def _floor0(v: Any) -> Any:
    """KL >= 0 always: a negative lower bound is replaced by the trivial one."""
    return None if v is None else max(0.0, float(v))


def _label(row: dict[str, Any]) -> str:
    text = str(row.get("label") or row.get("sampler") or "-")
    return text if len(text) <= LABEL_WIDTH else text[:LABEL_WIDTH - 3] + "..."


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """The end-of-run table: one line per row with :data:`COLUMNS`, then :data:`LEGEND`."""
    header = [h for h, _ in COLUMNS]
    table = [[cell(r) for _, cell in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(t, widths))) for t in table]
    return "\n".join(lines + [LEGEND])
