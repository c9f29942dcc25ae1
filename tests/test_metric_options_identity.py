"""A metric's options are part of the run identity without any list kept by hand.

The hazard this guards: the writer once listed the options that change a row's values by hand
(``metric_options()``), so a configurable metric missing from that list kept its stale rows when a
rerun changed the option (``mauve_num_seeds`` was missing; a new metric's rows kept 0.719 / 0.625
instead of 0.031).  Now each ``MetricSpec`` names an options dataclass and the run store compares
every field of it, so:

- a toy metric with an option, registered with one line, is recomputed when a rerun changes the option;
- every identity field of every registered options dataclass changes the run identity;
- every writer constructor option is either the writer's own or a field of a registered metric's options.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass

import lightning as L
import pytest
import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.forward_kl import FORWARD_KL_KEYS
from dllm_lit.results import ResultsWriter, registry
from dllm_lit.metrics.greedy import GREEDY_KEYS
from dllm_lit.results.metric_options import SandwichOptions
from dllm_lit.results.metric_options import identity
from dllm_lit.results.registry import MetricSpec
from dllm_lit.results.writer import LEGACY_METRIC_OPTIONS
from dllm_lit.samplers import MDLM

#: the writer's own options (files, intervals, resume, device); every other constructor option is a metric's
WRITER_OPTIONS = {"output_dir", "bootstrap_resamples", "confidence", "num_text_examples", "save_samples", "figures",
                  "figure_formats", "resume", "lm_device", "metric_options"}


@dataclass(frozen=True)
class ShiftOptions:
    token_shift: float = 0.0


class ShiftedMeanToken(Metric):
    """Mean token id plus ``token_shift`` (a stand-in for any metric with a value-changing option)."""

    interval_policy = IntervalPolicy(None, reason="toy metric")

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = shift
        self.add_state("total", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, samples: Tensor) -> None:
        self.total += samples.double().sum()
        self.count += samples.numel()

    def compute(self) -> Tensor:
        return self.total / self.count + self.shift


@pytest.fixture
def restore_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "METRICS", list(registry.METRICS))


def _run(out, **writer_kwargs) -> list[dict]:
    torch.set_num_threads(1)
    dm = MarkovDataModule(num_sequences=6, seq_len=8, chunk_size=6, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=0, figures=False, num_text_examples=0,
                           **writer_kwargs)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    predict(MDLM(steps=[2]), dm, writer, trainer=trainer)
    return json.loads((out / "metrics.json").read_text())["rows"]


def test_a_changed_metric_option_recomputes_the_rows(tmp_path, restore_registry) -> None:
    registry.register(MetricSpec(("shifted_mean",), lambda c: ShiftedMeanToken(c.options.token_shift),
                                 options=ShiftOptions))
    first = _run(tmp_path)
    with pytest.warns(UserWarning, match="metric options"):
        second = _run(tmp_path, metric_options={"token_shift": 10.0})
    # recomputed with the new option, not kept from the first run
    assert [r["shifted_mean"] for r in second] == pytest.approx([r["shifted_mean"] + 10.0 for r in first], abs=1e-12)
    meta = json.loads((tmp_path / "metrics.json").read_text())["meta"]
    assert meta["metric_options"]["token_shift"] == 10.0
    # the same option again: every row is kept
    third = _run(tmp_path, metric_options={"token_shift": 10.0})
    assert third == second


def test_unknown_metric_options_are_refused_in_one_line(restore_registry) -> None:
    with pytest.raises(ValueError, match="metric_options has no option 'token_shift'"):
        ResultsWriter(metric_options={"token_shift": 1.0})
    registry.register(MetricSpec(("shifted_mean",), lambda c: ShiftedMeanToken(c.options.token_shift),
                                 options=ShiftOptions))
    ResultsWriter(metric_options={"token_shift": 1.0})
    with pytest.raises(ValueError, match="set genppl_model as results.genppl_model"):
        ResultsWriter(metric_options={"genppl_model": "m"})
    with pytest.raises(ValueError, match="options must be a dataclass type"):
        MetricSpec(("x",), lambda c: None, options=dict)


def _other(value):
    """A different valid value of an option."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    return 7  # an unset count (e.g. mauve_num_reference)


def _configurable():
    return [s for s in registry.METRICS if s.options is not None]


#: the writer options that switch each configurable metric on, as the metric declares them (``switch_on``)
ENABLE = {s.name: dict(s.switch_on) for s in _configurable()}


def test_every_configurable_metric_is_switched_on_by_its_declared_options() -> None:
    for spec in _configurable():
        assert spec in registry.enabled_specs(ResultsWriter(**spec.switch_on)), spec.name


@pytest.mark.parametrize("spec_name, field", [(s.name, f) for s in _configurable() for f in identity(s.options())])
def test_every_identity_field_changes_the_run_identity(spec_name, field) -> None:
    base = ENABLE[spec_name]
    writer = ResultsWriter(**base)
    spec = next(s for s in registry.enabled_specs(writer) if s.name == spec_name)
    value = dataclasses.asdict(registry.spec_options(spec, writer))[field]
    top_level = field in inspect.signature(ResultsWriter).parameters
    changed = ({field: _other(value)} if top_level
               else {"metric_options": {**base.get("metric_options", {}), field: _other(value)}})
    other = ResultsWriter(**{**base, **changed})
    assert writer.metric_identity()[field] == value
    assert other.metric_identity() != writer.metric_identity(), field


def test_options_that_cannot_change_a_value_stay_out_of_the_identity() -> None:
    a = ResultsWriter(mauve_featurizer="m", cache_dir="/tmp/a", lm_device="cpu")
    b = ResultsWriter(mauve_featurizer="m", cache_dir="/tmp/b", lm_device=None)
    assert a.metric_identity() == b.metric_identity() and "cache_dir" not in a.metric_identity()


def test_default_identity_is_unchanged() -> None:
    """No opt-in metric is on by default: the identity holds the default columns and the always-on options only."""
    keys = [k for s in registry.enabled_specs(ResultsWriter()) for k in s.keys]
    # the always-on sequence-KL columns add their one option at its default (0: no sandwich)
    assert ResultsWriter().metric_identity() == {"keys": keys, "bootstrap_resamples": 200, "confidence": 0.95,
                                                 "sandwich_paths": 0}


def test_every_writer_option_is_the_writers_or_a_metrics() -> None:
    params = set(inspect.signature(ResultsWriter.__init__).parameters) - {"self"}
    registered = {f.name for s in _configurable() for f in dataclasses.fields(s.options)}
    assert params == WRITER_OPTIONS | set(LEGACY_METRIC_OPTIONS)
    assert set(LEGACY_METRIC_OPTIONS) <= registered
