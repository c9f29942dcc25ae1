"""Worker processes that stop when their parent is told to, or dies (benchmarks/grid.py's pool, the sweep runner's
points).  Imports nothing heavy, so a worker can arm it as its first action.

* :func:`die_with_parent`: on Linux the kernel sends the worker a signal the moment its parent ends
  (``prctl(PR_SET_PDEATHSIG)``), even when the parent is killed by SIGKILL and cannot clean up; a parent that ended
  before the call is caught by comparing ``os.getppid()``.  Elsewhere nothing is armed (False).
* :func:`end_processes`: SIGTERM to each process (its process group where it leads one), a grace period, then
  SIGKILL to whatever is left: every worker ends within ``grace`` seconds plus the kernel's reaping.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable

__all__ = ["die_with_parent", "end_processes", "GRACE_SECONDS"]

#: seconds a worker gets to stop on SIGTERM before SIGKILL (a run commits whole rows, so a kill loses no result)
GRACE_SECONDS = 2.0
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None, signum: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``signum`` to this process when its parent ends (Linux); exit at once if the parent
    (``parent_pid``) has already ended.  True when armed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
    return True


def _send(pid: int, signum: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # reaps our own child if it has ended
        return done == 0
    except ChildProcessError:  # not our child (or already reaped): ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def end_processes(pids: Iterable[int], grace: float = GRACE_SECONDS, groups: bool = False) -> None:
    """SIGTERM every pid (its process group with ``groups``), wait up to ``grace`` seconds for them to end, then
    SIGKILL those left."""
    pids = list(pids)
    for pid in pids:
        _send(pid, signal.SIGTERM, groups)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if groups or _alive(pid):
            _send(pid, signal.SIGKILL, groups)
