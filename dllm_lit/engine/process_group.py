"""Release the torch.distributed process group that Lightning's DDP launcher created for a run.

Lightning initialises the default process group when a DDP run starts and destroys it only for
NCCL (at interpreter exit).  A gloo group left alive when a worker process exits is torn down by
C++ static destructors while its threads are still joinable, and the process then aborts with
"terminate called without an active exception" (SIGABRT).  With ``strategy="ddp_spawn"`` on two
CPU processes this happened in about one run in ten on a 2-core machine, after the results had
been written, and the parent then raised ``ProcessExitedException``.  Destroying the group when
the run's last hook runs joins those threads from Python and the process exits cleanly.

Only groups of processes that Lightning itself launched (``ddp``, ``ddp_spawn``, ``ddp_fork``:
cluster environment :class:`~lightning.fabric.plugins.environments.LightningEnvironment`) are
released; under an external launcher (``torchrun``, SLURM, ...) the group is left to the caller.

:func:`watch_peers` guards the set-up of a ``ddp`` run (rank 0 starts the other ranks as child
processes running the same command).  Rank 0 hands its pid to the ranks it launches, which end with
one line as soon as it has died (:mod:`dllm_lit.util.orphan`: an orphaned rank would otherwise wait in
``init_process_group`` for up to Lightning's 30-minute timeout), and every rank ends with one line when
the process group is not set up within ``DLLM_LIT_DDP_SETUP_TIMEOUT`` seconds (default 300) of its own
wiring.  Lightning's own observer in rank 0 already ends the run when a child rank exits with an error.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch.distributed as dist

from dllm_lit.util.orphan import LAUNCHER_PID_ENV, stop_watching_launcher, watch_launcher

if TYPE_CHECKING:
    import lightning as L

__all__ = ["release_process_group", "watch_peers", "SETUP_TIMEOUT_ENV"]

#: environment variable: seconds to wait for the process group to be set up (default 300)
SETUP_TIMEOUT_ENV = "DLLM_LIT_DDP_SETUP_TIMEOUT"
#: seconds between two checks of the watcher
POLL_SECONDS = 1.0


def release_process_group(trainer: "L.Trainer | None") -> bool:
    """Destroy the default process group if Lightning launched ``trainer``'s processes; True if it did."""
    from lightning.fabric.plugins.environments import LightningEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    if trainer is None or not (dist.is_available() and dist.is_initialized()):
        return False
    strategy = trainer.strategy
    if not isinstance(strategy, DDPStrategy) or type(strategy.cluster_environment) is not LightningEnvironment:
        return False
    dist.destroy_process_group()
    return True


def _setup_timeout() -> float:
    raw = os.environ.get(SETUP_TIMEOUT_ENV, "300")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{SETUP_TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return value


def watch_peers(trainer: "L.Trainer") -> Callable[[], None] | None:
    """For a multi-process ``ddp`` run: start the watcher of the module docstring; returns a function that
    stops it (None for a single-process run, or where Lightning spawns the ranks from this process)."""
    if trainer.world_size <= 1 or getattr(trainer.strategy, "_start_method", "popen") != "popen":
        return None
    timeout = _setup_timeout()
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if local_rank == 0:  # rank 0: the ranks it launches inherit its environment
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    else:
        watch_launcher()  # started by cli.py already; here for Python use
    stop = threading.Event()
    started = time.monotonic()

    def run() -> None:
        while not stop.wait(POLL_SECONDS):
            if dist.is_initialized():  # set up: from here on, errors of the collectives end the run
                return
            if time.monotonic() - started > timeout:
                sys.stderr.write(f"error: the process group was not set up within {timeout:g} s (a rank did not start "
                                 f"or join); set {SETUP_TIMEOUT_ENV} to wait longer; stopping local rank {local_rank}\n")
                sys.stderr.flush()
                os._exit(1)

    threading.Thread(target=run, name="dllm_lit-setup-watch", daemon=True).start()

    def stop_all() -> None:
        stop.set()
        stop_watching_launcher()

    return stop_all
