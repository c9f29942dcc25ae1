"""Checks of a predict run's results settings, made before anything is sampled or a previous run's file is
touched; each failure is one ``ValueError`` line naming the field and what is allowed."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dllm_lit.results import registry
from dllm_lit.results.metric_options import make_options, option_names

__all__ = ["check_complete_rows", "check_metric_options", "check_metrics_fit_run"]


def check_complete_rows(trainer: Any, pending: int) -> None:
    """A run must sample every sequence of every row: refuse ``fast_dev_run`` and a ``limit_predict_batches``
    below the ``pending`` work items."""
    if getattr(trainer, "fast_dev_run", False):
        raise ValueError("trainer.fast_dev_run samples only the first work item, so rows would be incomplete: "
                         "set it to false and make the run small with data.num_sequences / data.seq_len instead")
    limit = trainer.limit_predict_batches
    if limit is None:
        return
    short = (isinstance(limit, int) and not isinstance(limit, bool) and limit < pending) or (
        isinstance(limit, float) and limit < 1.0)
    if short:
        raise ValueError(f"trainer.limit_predict_batches={limit} would sample only part of the {pending} work "
                         "items, so rows would be incomplete: leave it unset and make the run small with "
                         "data.num_sequences / data.seq_len instead")


def check_metrics_fit_run(source: Any, num_sequences: int) -> None:
    """Each enabled metric's options fit a run of ``num_sequences`` per row (``check_run`` of its options, e.g.
    MAUVE's k-means buckets); ``source`` is the results writer."""
    for spec in registry.enabled_specs(source):
        check_run = getattr(registry.spec_options(spec, source), "check_run", None)
        if check_run is not None:
            check_run(int(num_sequences))


def check_metric_options(extra: Mapping[str, Any], values: Mapping[str, Any], own: Iterable[str]) -> None:
    """``extra`` (``results.metric_options``) names options of registered metrics only, none of the writer's
    ``own`` parameters; every registered options dataclass accepts ``values`` (each checks its fields)."""
    own = set(own)
    known = {name for spec in registry.METRICS for name in option_names(spec.options)}
    for name in extra:
        if name in own:
            raise ValueError(f"metric_options: set {name} as results.{name}, not in metric_options")
        if name not in known:
            allowed = ", ".join(sorted(known - own))
            raise ValueError(f"metric_options has no option {name!r}; " + (
                f"the registered metrics' options are: {allowed}" if allowed else
                "no registered metric has options beyond the results.* ones (genppl_*, mauve_*, max_text_length)"))
    for spec in registry.METRICS:
        if spec.options is not None:
            make_options(spec.options, values)
