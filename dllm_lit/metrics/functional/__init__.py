"""Functional metric code: pure functions of samples/texts and the one bootstrap interval path.

The metric classes of :mod:`dllm_lit.metrics` (torchmetrics states, DDP synchronisation) delegate
their arithmetic here.
"""
