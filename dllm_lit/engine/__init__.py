"""How a run is put together: its plan (rows and work items) and the one wiring step."""
from dllm_lit.engine.plan import REFERENCE_NAME, Row, RunPlan, WorkItem
from dllm_lit.engine.wiring import connect, connect_training, predict

__all__ = ["REFERENCE_NAME", "Row", "RunPlan", "WorkItem", "connect", "connect_training", "predict"]
