"""The low floor of a run, below the samplers: its plan (rows and work items), the size budget, the process group
and sampling threads.

The wiring step lives with the command line (:mod:`dllm_lit.cli.wiring`, above the samplers); its names
``connect``, ``connect_training`` and ``predict`` are also offered here, loaded on first use, so that
``dllm_lit.engine.predict(...)`` keeps working and importing the plan never imports the samplers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dllm_lit.engine.plan import REFERENCE_NAME, Row, RunPlan, WorkItem
from dllm_lit.util.lazy_exports import lazy_exports

__all__ = ["REFERENCE_NAME", "Row", "RunPlan", "WorkItem", "connect", "connect_training", "predict"]

__getattr__, __dir__ = lazy_exports(__name__, {name: "dllm_lit.cli.wiring" for name in ("connect", "connect_training",
                                                                                    "predict")})


if TYPE_CHECKING:
    from dllm_lit.cli.wiring import connect, connect_training, predict
