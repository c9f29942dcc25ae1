"""How many intra-op threads the sampling loops use.

The samplers' step loops are many small tensor operations (gathers, scans, one row of V per
position).  PyTorch's default intra-op pool (one thread per core) pays a synchronisation cost per
operation that dwarfs the work, and on a machine whose cores are busy with other processes its
threads wait for each other: on this project's 2-core machine a ReMDM run took 182 s with the
default and 19 s with one thread (identical output), and LLaDA / MDLM step loops ran 8-10x faster
with one thread under load.  Sampling therefore runs with ONE intra-op thread unless the user says
otherwise with ``DLLM_LIT_THREADS`` (an integer >= 1).  Results do not depend on the thread count.
Outside sampling (the oracle's one-off power-table build: large dense products) torch's own
setting applies.  Parallelism across cores comes from processes (DDP / the sweep runner) instead.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

__all__ = ["sampling_threads", "sampling_thread_count"]


def sampling_threads() -> int:
    """``DLLM_LIT_THREADS`` if set (validated), else 1."""
    raw = os.environ.get("DLLM_LIT_THREADS")
    if raw is None or raw == "":
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"DLLM_LIT_THREADS must be an integer >= 1, got {raw!r}")
    return n


@contextlib.contextmanager
def sampling_thread_count() -> Iterator[int]:
    """Run the block with :func:`sampling_threads` intra-op threads, then restore torch's setting."""
    before = torch.get_num_threads()
    n = sampling_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)
