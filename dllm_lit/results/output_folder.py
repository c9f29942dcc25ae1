"""One live run per output folder, and what a killed run left behind in it.

:func:`lock_output_folder` takes an advisory ``flock`` on ``<folder>/.dllm_lit.lock`` (non-blocking) and
writes the holder's pid into it; a second run into the same folder is refused with one line while the
first is alive.  The kernel drops the lock when the holder exits, however it ends (``kill -9`` too),
so a lock never outlives its run.

:func:`remove_leftovers` deletes the temporary files of interrupted atomic writes
(:func:`dllm_lit.util.atomic.atomic_write` names them ``.<file>.<random>.tmp``) of the files a run writes;
it is called with the lock held, so no live writer owns them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import IO

__all__ = ["LOCK_NAME", "lock_output_folder", "unlock_output_folder", "remove_leftovers"]

LOCK_NAME = ".dllm_lit.lock"
#: the files of a run folder written through atomic_write (figures: any name in figures/)
_WRITTEN = ("metrics.json", "metrics.csv", "samples.pt", "samples.txt", "seals.json")


def lock_output_folder(folder: Path) -> IO[str] | None:
    """The open, locked lock file of ``folder``; ValueError (one line) if another live process holds it.

    None when the holder is this process's parent: the process that launched a ``ddp_spawn`` worker took the
    lock for the run before starting it.
    """
    import fcntl

    fh = open(folder / LOCK_NAME, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = False
    except OSError:
        held = True
    if held:  # raised outside the handler: the message is the one line the CLI shows
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        if holder == str(os.getppid()):
            return None
        raise ValueError(f"results.output_dir {str(folder)!r} is in use by another live run (pid {holder}); wait for "
                         "it to end or give this run another --trainer.default_root_dir")
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def unlock_output_folder(fh: IO[str] | None) -> None:
    """Release a lock taken by :func:`lock_output_folder` (closing the file drops it)."""
    if fh is not None and not fh.closed:
        fh.close()


def remove_leftovers(folder: Path) -> int:
    """Delete interrupted atomic writes' temporary files of a run folder; returns how many."""
    patterns = [f".{name}.*.tmp" for name in _WRITTEN] + [".write-check.*"]
    found = [p for pattern in patterns for p in folder.glob(pattern)]
    if (folder / "figures").is_dir():
        found += list((folder / "figures").glob(".*.tmp"))
    for p in found:
        p.unlink(missing_ok=True)
    return len(found)
