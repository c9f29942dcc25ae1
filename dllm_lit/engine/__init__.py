"""How a run is put together: its plan (rows and work items) and the one wiring step.

The wiring names (``connect``, ``connect_training``, ``predict``) load on first use (module ``__getattr__``):
the wiring step imports the samplers, which import the plan and the budget of this package, so importing
a submodule such as :mod:`dllm_lit.engine.plan` must not import the wiring step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dllm_lit.engine.plan import REFERENCE_NAME, Row, RunPlan, WorkItem
from dllm_lit.lazy_exports import lazy_exports

__all__ = ["REFERENCE_NAME", "Row", "RunPlan", "WorkItem", "connect", "connect_training", "predict"]

__getattr__, __dir__ = lazy_exports(__name__, {"connect": "wiring", "connect_training": "wiring", "predict": "wiring"})


if TYPE_CHECKING:
    from dllm_lit.engine.wiring import connect, connect_training, predict
