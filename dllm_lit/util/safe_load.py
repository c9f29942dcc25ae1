"""Why a ``torch.load`` of a user's file failed, in one line.

torch's weights-only refusal is a 10-25 line essay; the CLI shows one line per error.  :func:`load_failure`
names the classes a weights-only load refused (read from the pickle's opcodes, nothing runs) or the
error's type and first line.
"""
from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["load_failure", "unsafe_globals"]


def unsafe_globals(path: str | Path) -> list[str]:
    """The globals the pickle in ``path`` names that a weights-only load refuses ([] if it cannot tell)."""
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # noqa: BLE001 - a damaged file, or torch < 2.5: the caller reports the load error
        return []


def load_failure(path: str | Path, exc: BaseException, weights_only: bool = True) -> str:
    """One line: "it holds objects a weights-only load refuses (a.B, ...)" or "<Type>: <first line>"."""
    unsafe = unsafe_globals(path) if weights_only else []
    if unsafe:
        shown = ", ".join(unsafe[:3]) + (f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else "")
        return f"it holds objects a weights-only load refuses ({shown}), and unpickling them could run code"
    text = str(exc)
    if "WeightsUnpickler error:" in text:  # torch's essay (its advice is to load with weights_only=False): the reason
        text = text.split("WeightsUnpickler error:", 1)[1]
        text = text.split("Check the documentation of torch.load", 1)[0]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"not a readable torch file ({type(exc).__name__}{': ' + first[:200] if first else ''})"
