"""A test sampler: MDLM's draws, with an optional pause per work item (``DLLM_TEST_ITEM_DELAY`` seconds)
so that a signal can be sent while a row is being sampled, and an optional failure at one steps value
(``DLLM_TEST_FAIL_STEPS``) so that a run ends after some rows.  Neither is an option: the rows of a paused,
failing and plain run have the same settings, label and values."""
from __future__ import annotations

import os
import time

from dllm_lit.samplers import MDLM


class SlowMDLM(MDLM):
    sampler_name = "slow_mdlm"

    @staticmethod
    def _misbehave(steps) -> None:
        delay = float(os.environ.get("DLLM_TEST_ITEM_DELAY", "0"))
        end = time.monotonic() + delay
        while time.monotonic() < end:  # short sleeps: a signal handler runs between them
            time.sleep(0.02)
        if str(steps) == os.environ.get("DLLM_TEST_FAIL_STEPS"):
            raise RuntimeError(f"test failure at steps={steps}")

    def generate_with_nfe(self, indices, seq_len, steps, seed):
        self._misbehave(steps)
        return super().generate_with_nfe(indices, seq_len, steps, seed)

    def generate_with_stats(self, indices, seq_len, steps, seed):  # what a run calls (MDLM's own, no nfe call)
        self._misbehave(steps)
        return super().generate_with_stats(indices, seq_len, steps, seed)
