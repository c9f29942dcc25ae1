"""The results table is data: a metric is one class plus one registry line, and nothing else.

The toy metric below (the mean token id, with a percentile interval of its ratio of sums) is added
with one :func:`~dllm_lit.results.registry.register` call and appears in metrics.json, metrics.csv
and a figure without any change to the writer or the figures.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Mapping

import lightning as L
import pytest
import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.metrics.bootstrap import PERCENTILE, RatioOfSums, SequenceBootstrapMixin, ratio_ci
from dllm_lit.metrics.distributed import TypedCatStateMixin, synced_cat_states
from dllm_lit.results import ResultsWriter, registry
from dllm_lit.results.registry import MetricSpec
from dllm_lit.samplers import MDLM


class MeanTokenId(SequenceBootstrapMixin, TypedCatStateMixin, Metric):
    """Mean token id over all positions; per-sequence sums and lengths for its interval."""

    full_state_update = False
    interval_policy = PERCENTILE
    _cat_state_specs = {"seq_sum": (torch.int64, ()), "seq_len": (torch.int64, ())}

    def __init__(self) -> None:
        super().__init__()
        self.add_state("seq_sum", default=[], dist_reduce_fx="cat")
        self.add_state("seq_len", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor) -> None:
        self.seq_sum.append(samples.long().sum(dim=1))
        self.seq_len.append(torch.full((samples.shape[0],), samples.shape[1], dtype=torch.int64))

    def compute(self) -> Tensor:
        return torch.cat(self.seq_sum).sum().double() / torch.cat(self.seq_len).sum()

    def sequence_statistics(self) -> dict[str, Tensor]:
        with synced_cat_states(self, {"seq_sum": torch.int64, "seq_len": torch.int64}) as states:
            return {"sum": states["seq_sum"], "len": states["seq_len"]}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> RatioOfSums:
        return RatioOfSums(statistics["sum"], statistics["len"])


@pytest.fixture
def restore_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "METRICS", list(registry.METRICS))


def _run(tmp_path, resamples: int) -> ResultsWriter:
    torch.set_num_threads(1)
    dm = MarkovDataModule(num_sequences=12, seq_len=16, chunk_size=5, seed=3)
    writer = ResultsWriter(output_dir=str(tmp_path), bootstrap_resamples=resamples, num_text_examples=0)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    predict(MDLM(steps=[2, 4]), dm, writer, trainer=trainer)
    return writer


def test_one_class_and_one_registry_line_add_a_metric(tmp_path, restore_registry) -> None:
    registry.register(MetricSpec(("mean_token",), lambda c: MeanTokenId(), labels={"mean_token": "mean token id"},
                                 figures=("mean_token",)))
    _run(tmp_path, resamples=20)
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    samples = {(r["sampler"], r["steps"]): r["samples"] for r in torch.load(tmp_path / "samples.pt")["rows"]}
    assert [(r["sampler"], r["steps"]) for r in rows] == [("ar", None), ("mdlm", 2), ("mdlm", 4)]
    for r in rows:
        x = samples[(r["sampler"], r["steps"])].long()
        assert r["mean_token"] == pytest.approx(x.double().mean().item(), rel=1e-12)
        # the interval is the one bootstrap path over sequences in index order, with the run's seed
        expected = ratio_ci(x.sum(dim=1), torch.full((x.shape[0],), x.shape[1]), num_resamples=20, seed=r["seed"])
        assert r["mean_token_ci"] == list(expected)
        keys = list(r)
        assert keys.index("mean_token") == keys.index("seq_kl_bracket_hi") + 1  # after the built-in values (first-order world)
        assert keys[-1] == "mean_token_ci"  # after the built-in intervals
    with open(tmp_path / "metrics.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert {"mean_token", "mean_token_ci_low", "mean_token_ci_high"} <= set(csv_rows[0])
    assert float(csv_rows[1]["mean_token"]) == pytest.approx(rows[1]["mean_token"])
    assert (tmp_path / "figures" / "mean_token_vs_steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert registry.labels()["mean_token"] == "mean token id"


def test_intervals_off_keep_no_per_sequence_states(tmp_path) -> None:
    writer = _run(tmp_path, resamples=0)
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert not any(k.endswith("_ci") for r in rows for k in r)
    transition = writer.metrics[0][0].metric
    assert not transition.per_sequence and not hasattr(transition, "codes")


def test_spec_validation_and_registration(restore_registry) -> None:
    build = lambda c: MeanTokenId()  # noqa: E731
    with pytest.raises(ValueError, match="distinct non-empty"):
        MetricSpec(("a", "a"), build)
    with pytest.raises(ValueError, match="reads must be one of"):
        MetricSpec(("a",), build, reads="tokens")
    with pytest.raises(ValueError, match="labels and figures must name keys"):
        MetricSpec(("a",), build, figures=("b",))
    with pytest.raises(ValueError, match=r"^metric key 'kl' is already registered; choose another name$"):
        registry.register(MetricSpec(("kl",), build))
    spec = MetricSpec(("a", "b"), build)
    assert spec.values({"a": torch.tensor(1.0), "b": 2, "c": 3}) == {"a": 1.0, "b": 2.0}
    assert spec.intervals(None) == {"a_ci": None, "b_ci": None}
    assert spec.intervals({"a": (0.0, 1.0), "b": (1.0, 2.0)}) == {"a_ci": [0.0, 1.0], "b_ci": [1.0, 2.0]}
    with pytest.raises(ValueError, match="one value for 2 keys"):
        spec.values(torch.tensor(1.0))
    # the built-in table: names, order and which metrics need texts
    default = registry.enabled_specs(ResultsWriter())
    assert [k for s in default for k in s.keys] == [
        "nll", "kl", "tv", "entropy", "unigram_l1", "other_mass", "support_frac", "div2", "div3", "dup_rate",
        "kl_excess", "entropy_mm", "kl_mm", "seq_kl_lower", "seq_kl_upper", "trans_kl_corrected", "kl_cs",
        "seq_kl_iw_lower", "seq_kl_iw_upper", "seq_kl_bracket_lo", "seq_kl_bracket_hi"]
    lm = registry.enabled_specs(ResultsWriter(genppl_model="m", mauve_featurizer="m", forward_kl=True))
    assert [(s.name, s.reads, s.reference) for s in lm[-4:]] == [
        ("genppl", "texts", False), ("mauve+mauve_seed_mean+mauve_seed_std", "texts", True),
        ("kl_excess+entropy_mm+kl_mm+seq_kl_lower+seq_kl_upper+trans_kl_corrected+kl_cs+seq_kl_iw_lower+"
         "seq_kl_iw_upper+seq_kl_bracket_lo+seq_kl_bracket_hi", "stats", False),
        ("seq_kl_fwd+seq_kl_fwd_theory+seq_kl_fwd_bound_tc+seq_kl_fwd_bound_dtc+seq_kl_fwd_bound_mi", "stats", False)]
    # then the HMM-world figures (drawn only when rows carry those keys)
    assert registry.figure_keys() == ("kl", "nll", "entropy", "div3", "world_nll", "ngram_kl2_excess",
                                      "ngram_kl3_excess", "dep_excess", "task_accuracy")
    # what a spec reads is checked when the run is wired
    with pytest.raises(ValueError, match="mauve.* need reference samples"):
        ResultsWriter(mauve_featurizer="m").connect(None, None, decoder=object())
    with pytest.raises(ValueError, match="genppl need a text decoder"):
        ResultsWriter(genppl_model="m").connect(None, None)
