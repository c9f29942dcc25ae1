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
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist

if TYPE_CHECKING:
    import lightning as L

__all__ = ["release_process_group"]


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
