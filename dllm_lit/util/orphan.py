"""End a ``ddp`` child rank whose launcher (rank 0) has died, from the first line of the program on.

Rank 0 of a Lightning ``ddp`` run starts the other ranks as child processes running the same command,
with its pid in ``DLLM_LIT_LAUNCHER_PID`` (:func:`dllm_lit.engine.process_group.watch_peers`).  A child
whose parent is no longer that pid is orphaned: it would otherwise wait in ``init_process_group``
for up to Lightning's 30-minute timeout.  :func:`watch_launcher` polls once a second on a daemon thread
and ends the process with one line.  This module imports nothing heavy, so ``cli.py`` starts the
watcher before the libraries load (which takes tens of seconds on a busy machine).
"""
from __future__ import annotations

import os
import sys
import threading

__all__ = ["LAUNCHER_PID_ENV", "watch_launcher", "stop_watching_launcher"]

#: environment variable in which rank 0 passes its pid to the ranks it launches
LAUNCHER_PID_ENV = "DLLM_LIT_LAUNCHER_PID"
#: seconds between two checks
POLL_SECONDS = 1.0
_started: list[bool] = []
_stopped = threading.Event()


def stop_watching_launcher() -> None:
    """The rank's run has ended: rank 0 may now exit first without this rank reporting an error."""
    _stopped.set()


def watch_launcher() -> bool:
    """Start the watcher in a child rank (``LOCAL_RANK`` > 0 with a launcher pid set); True if it runs."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    except ValueError:
        return False
    if launcher is None or local_rank <= 0:
        return False
    if _started:
        return True
    _started.append(True)

    def run() -> None:
        while not _stopped.wait(POLL_SECONDS):
            if str(os.getppid()) != launcher:
                sys.stderr.write(f"error: rank 0 (pid {launcher}), which launched this rank, has ended; stopping "
                                 f"local rank {local_rank}\n")
                sys.stderr.flush()
                os._exit(1)

    threading.Thread(target=run, name="dllm_lit-launcher-watch", daemon=True).start()
    return True
