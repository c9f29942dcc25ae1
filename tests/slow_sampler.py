"""A test sampler: MDLM's draws, with an optional pause per work item (``DLLM_TEST_ITEM_DELAY`` seconds)
so that a signal can be sent while a row is being sampled.  The pause is not an option: the rows of a
paused and an unpaused run have the same settings, label and values."""
from __future__ import annotations

import os
import time

from dllm_lit.samplers import MDLM


class SlowMDLM(MDLM):
    sampler_name = "slow_mdlm"

    def generate_with_nfe(self, indices, seq_len, steps, seed):
        delay = float(os.environ.get("DLLM_TEST_ITEM_DELAY", "0"))
        end = time.monotonic() + delay
        while time.monotonic() < end:  # short sleeps: a signal handler runs between them
            time.sleep(0.02)
        return super().generate_with_nfe(indices, seq_len, steps, seed)
