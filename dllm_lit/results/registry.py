"""The metrics of the results table, as data: one :class:`MetricSpec` per metric in :data:`METRICS`.

The results writer and the figures iterate over this list; neither names a metric.  A row of
``metrics.json`` holds ``sampler, steps, seed``, then the values of every enabled spec's keys (in
this order), then -- when intervals are on -- ``<key>_ci`` for every key: ``[low, high]`` under
the spec's interval policy, or ``null`` when the policy has none.  A value that a row cannot have
(e.g. ``seq_kl_upper`` for a sampler whose order depends on its tokens) is ``null``.  The interval
method of every key is written to ``metrics.json`` (``meta.intervals.per_key``, :func:`interval_methods`).

Adding a metric takes one metric module and one line here:

1. ``dllm_lit/metrics/<name>.py``: a torchmetrics ``Metric`` declaring an ``interval_policy``; with
   an interval it also gives its per-sequence sufficient statistics
   (:class:`~dllm_lit.metrics.bootstrap.SequenceBootstrapMixin`).
2. One entry in :data:`METRICS`, e.g.
   ``MetricSpec(("mean_token",), lambda c: MeanTokenId(), labels={"mean_token": "mean token id"}, figures=("mean_token",))``.

A configurable metric names a frozen options dataclass (``options=MyOptions``,
:mod:`dllm_lit.results.metric_options`): ``build`` reads ``context.options.<field>``, the fields are set as
``results.metric_options: {<field>: value}``, and they are part of the run identity automatically.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, is_dataclass
from functools import cached_property
from typing import Any

from torchmetrics import Metric

from dllm_lit import checks
from dllm_lit.util.registration import refuse_clash
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.metrics.bootstrap import Policies
from dllm_lit.metrics.duplication_rate import DuplicationRate
from dllm_lit.metrics.forward_kl import FORWARD_KL_KEYS, ForwardSequenceKL
from dllm_lit.metrics.functional.transition import METRIC_KEYS
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.greedy import GREEDY_KEYS, GreedyScore
from dllm_lit.metrics.mauve_seeds import MauveOverSeeds
from dllm_lit.metrics.ngram_diversity import NgramDiversity
from dllm_lit.metrics.sequence_kl import SEQUENCE_KL_KEYS, SequenceKL
from dllm_lit.metrics.transition import TransitionMetrics
from dllm_lit.metrics.dependence import DEPENDENCE_KEYS, DependenceProfile
from dllm_lit.metrics.ngram_kl import NGRAM_KL_KEYS, NgramKL
from dllm_lit.metrics.world_nll import WorldNLL
from dllm_lit.metrics.task_accuracy import TaskAccuracy
from dllm_lit.results.metric_options import (ForwardKLOptions, GenPPLOptions, GreedyOptions, MauveOptions, SandwichOptions,
                                             make_options, merged_identity, option_names)


def hmm_world(chain: Any) -> Any:
    """``chain`` if it is an HMM world (beyond the first-order chain), else None."""
    from dllm_lit.markov.hmm import HMMWorld

    return chain if isinstance(chain, HMMWorld) else None


def first_order(chain: Any) -> MarkovChain:
    """The chain the transition metrics compare against: the chain itself, or an HMM world's exact bigram law."""
    world = hmm_world(chain)
    return chain if world is None else world.bigram_chain

__all__ = ["METRICS", "MetricContext", "MetricSpec", "enabled_specs", "figure_keys", "interval_methods", "labels",
           "metric_identity", "register", "spec_options"]


@dataclass
class MetricContext:
    """What a spec's ``build`` may use; one per run, shared by the rows.

    Attributes:
        chain: the run's Markov chain.
        options: the spec's options (an instance of its ``options`` dataclass), or the results writer for a
            spec without one.
        device: device for language models (the writer's ``lm_device`` or the sampler's device).
        intervals: whether intervals will be asked for (metrics then keep per-sequence statistics).
        data_cache_dir: the data module's cache directory, if any.
        reference_samples: ``n -> LongTensor[n, T]`` exact chain samples disjoint from the rows, if wired.
        decoder: the chain's text decoder, if wired.
    """

    chain: MarkovChain
    options: Any
    device: str | None = None
    intervals: bool = True
    data_cache_dir: str | None = None
    reference_samples: Callable[[int | None], Any] | None = None
    decoder: Any = None

    def cache_dir(self, name: str) -> str | None:
        """On-disk cache of a metric: the writer's ``cache_dir`` if set, else ``<data cache>/<name>``."""
        if getattr(self.options, "cache_dir", None):
            return self.options.cache_dir
        return os.path.join(self.data_cache_dir, name) if self.data_cache_dir else None

    @cached_property
    def reference_texts(self) -> list[str]:
        """``options.mauve_num_reference`` exact chain samples decoded to text (once per run)."""
        if self.reference_samples is None or self.decoder is None:
            raise ValueError("reference texts need the run's reference samples and decoder: wire the run with a data module")
        return self.decoder.decode_batch(self.reference_samples(getattr(self.options, "mauve_num_reference", None)))


def _always(options: Any) -> bool:
    return True


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the results table.

    Attributes:
        keys: its result keys, in row order; a metric whose ``compute()`` returns a dict gives these
            keys, any other gives the one value of ``keys[0]``.
        build: ``MetricContext -> Metric``, called once per row.
        reads: ``"ids"`` (the samples, ``LongTensor[n, T]``), ``"texts"`` (them decoded) or ``"stats"``
            (``update(samples, stats)`` with the sampler's per-sequence statistics ``{"index", "nfe",
            "log_q", ...}``, each a tensor over the n sequences; see ``Sampler.generate_with_stats``).
        interval: its interval policy (or one per key); None = the metric's own ``interval_policy``.
        labels: axis label of each key in figures (default: the key).
        figures: keys drawn as ``figures/<key>_vs_steps.png``.
        enabled: predicate on the spec's options instance (e.g. a language model was named), or on the
            writer for a spec without options.
        options: frozen dataclass of the metric's options (:mod:`dllm_lit.results.metric_options`); its
            fields are part of the run identity unless marked ``NOT_IDENTITY``.
        reference: whether ``build`` reads ``context.reference_texts``.
        pairs_with_reference: whether each row's metric is compared with the same metric on the run's
            reference row (exact chain samples, same sequence indices): the writer calls
            ``metric.pair_with(reference_row_metric)`` (``None`` when the run has no reference row).
        switch_on: for a spec with options, the ``ResultsWriter`` keyword arguments that enable it (e.g.
            ``{"metric_options": {"greedy": True}}``; ``{}`` for one always on); the tests read it to check that
            every options field changes the run identity.
    """

    keys: tuple[str, ...]
    build: Callable[[MetricContext], Metric]
    reads: str = "ids"
    interval: Policies | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    enabled: Callable[[Any], bool] = _always
    reference: bool = False
    pairs_with_reference: bool = False
    options: type | None = None
    switch_on: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        keys = tuple(self.keys)
        if not keys or len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
            raise ValueError(f"keys must be distinct non-empty strings, got {self.keys!r}")
        object.__setattr__(self, "keys", keys)
        checks.choice("reads", self.reads, ("ids", "texts", "stats"))
        unknown = (set(self.labels) | set(self.figures)) - set(keys)
        if unknown:
            raise ValueError(f"labels and figures must name keys of the spec {keys}, got {sorted(unknown)}")
        if self.options is not None and not (isinstance(self.options, type) and is_dataclass(self.options)):
            raise ValueError(f"options must be a dataclass type, got {self.options!r}")

    @property
    def name(self) -> str:
        return self.keys[0] if len(self.keys) == 1 else "+".join(self.keys)

    def values(self, computed: Any) -> dict[str, float | None]:
        """``{key: float or None}`` from the metric's ``compute()`` (None: the row cannot have that value)."""
        if isinstance(computed, Mapping):
            return {k: _float(computed[k]) for k in self.keys}
        if len(self.keys) != 1:
            raise ValueError(f"metric {self.name} returned one value for {len(self.keys)} keys")
        return {self.keys[0]: _float(computed)}

    def intervals(self, interval: Any) -> dict[str, list[float] | None]:
        """``{"<key>_ci": [low, high] or None}`` from the metric's interval."""
        if interval is None:
            return {f"{k}_ci": None for k in self.keys}
        if isinstance(interval, Mapping):
            return {f"{k}_ci": (None if interval.get(k) is None else list(interval[k])) for k in self.keys}
        return {f"{self.keys[0]}_ci": list(interval)}


def _float(x: Any) -> float | None:
    if x is None:
        return None
    return float(x.item()) if hasattr(x, "item") else float(x)


#: the results table, in row order
METRICS: list[MetricSpec] = [
    MetricSpec(METRIC_KEYS, lambda c: TransitionMetrics(first_order(c.chain), per_sequence=c.intervals),
               labels={"nll": "NLL per token (nats)", "kl": "transition KL (nats)", "tv": "transition TV",
                       "entropy": "transition entropy (nats)", "unigram_l1": "unigram L1",
                       "other_mass": "other-mass rate", "support_frac": "support fraction"},
               figures=("kl", "nll", "entropy")),
    MetricSpec(("div2",), lambda c: NgramDiversity(2, per_sequence=c.intervals), labels={"div2": "2-gram diversity"}),
    MetricSpec(("div3",), lambda c: NgramDiversity(3, per_sequence=c.intervals), labels={"div3": "3-gram diversity"},
               figures=("div3",)),
    MetricSpec(("dup_rate",), lambda c: DuplicationRate(), labels={"dup_rate": "duplication rate"}),
    MetricSpec(("genppl",), lambda c: GenerativePerplexity(
        c.options.genppl_model, batch_size=c.options.genppl_batch_size, max_length=c.options.max_text_length,
        device=c.device), reads="texts", labels={"genppl": "GenPPL"}, enabled=lambda o: bool(o.genppl_model),
        options=GenPPLOptions, switch_on={"genppl_model": "m"}),
    MetricSpec(("mauve", "mauve_seed_mean", "mauve_seed_std"), lambda c: MauveOverSeeds(
        c.reference_texts, featurizer=c.options.mauve_featurizer, max_text_length=c.options.max_text_length,
        num_buckets=c.options.mauve_num_buckets, device=c.device, cache_dir=c.cache_dir("mauve"),
        num_seeds=c.options.mauve_num_seeds),
        reads="texts", reference=True, labels={"mauve": "MAUVE", "mauve_seed_mean": "MAUVE (mean over k-means seeds)",
                                                "mauve_seed_std": "MAUVE (std over k-means seeds)"},
        enabled=lambda o: bool(o.mauve_featurizer), options=MauveOptions, switch_on={"mauve_featurizer": "m"}),
    MetricSpec(SEQUENCE_KL_KEYS, lambda c: SequenceKL(first_order(c.chain), world=hmm_world(c.chain)), reads="stats",
               pairs_with_reference=True, options=SandwichOptions,
               labels={"kl_excess": "transition KL minus exact-sample KL (nats)",
                       "entropy_mm": "transition entropy, Miller-Madow (nats)",
                       "kl_mm": "transition KL, Miller-Madow (nats)",
                       "seq_kl_lower": "sequence KL per token, lower bound (DV, nats)",
                       "seq_kl_upper": "sequence KL per token, upper end (nats)",
                       "trans_kl_corrected": "(T-1)/T x floor-corrected transition KL (nats)",
                       "kl_cs": "transition KL, Chao-Shen entropy (nats)",
                       "seq_kl_iw_lower": "sequence KL per token, importance-weighted lower estimate (nats)",
                       "seq_kl_iw_upper": "sequence KL per token, sandwich upper estimate (nats)",
                       "seq_kl_bracket_lo": "sequence KL per token, certified lower bound (95%, nats)",
                       "seq_kl_bracket_hi": "sequence KL per token, certified upper bound (95%, nats)"}),
    MetricSpec(FORWARD_KL_KEYS, lambda c: ForwardSequenceKL(), reads="stats", enabled=lambda o: bool(o.forward_kl), options=ForwardKLOptions,
               switch_on={"forward_kl": True},
               labels={"seq_kl_fwd": "E_order KL(chain || sampler | order) per token (nats)",
                       "seq_kl_fwd_theory": "predicted E_order KL(chain || sampler | order) per token (nats)",
                       **{f"seq_kl_fwd_bound_{b}": f"{b.upper()} bound on E_order KL per token (nats)" for b in ("tc", "dtc", "mi")}}),
]


# ---- every-world metrics (HMM worlds; first-order runs keep the table above unchanged) -------------------------
def _in_hmm_world(options: Any) -> bool:
    return hmm_world(getattr(options, "chain", None)) is not None


METRICS += [
    MetricSpec(("world_nll",), lambda c: WorldNLL(c.chain), reads="stats", enabled=_in_hmm_world,
               labels={"world_nll": "NLL per token under the world (nats)"}, figures=("world_nll",)),
    MetricSpec(NGRAM_KL_KEYS, lambda c: NgramKL(c.chain), reads="stats", pairs_with_reference=True,
               enabled=_in_hmm_world, figures=("ngram_kl2_excess", "ngram_kl3_excess"),
               labels={**{f"ngram_kl{n}": f"{n}-gram KL to the exact marginal (nats)" for n in (1, 2, 3)},
                       **{f"ngram_kl{n}_excess": f"{n}-gram KL minus exact-sample KL (nats)" for n in (1, 2, 3)}}),
    MetricSpec(DEPENDENCE_KEYS, lambda c: DependenceProfile(c.chain), reads="stats", pairs_with_reference=True,
               enabled=_in_hmm_world, figures=("dep_excess",),
               labels={"dep_excess": "I(X_i; X_i+d) minus exact samples', mean over d (nats)",
                       "dep_excess_far": "I(X_i; X_i+d) minus exact samples', d >= 16 (nats)"}),
]

# ---- exact greedy scores (opt-in: an exact mode search per distinct prompt; docs/greedy.md) ----------------------
METRICS.append(MetricSpec(
    GREEDY_KEYS, lambda c: GreedyScore(c.chain, c.options.greedy_rank_limit, c.options.greedy_prompt_length),
    reads="stats", enabled=lambda o: bool(o.greedy), options=GreedyOptions,
    switch_on={"metric_options": {"greedy": True}},
    labels={"greedy_regret": "per-token regret to the exact mode (nats)", "greedy_mode_frac": "fraction equal to the mode",
            "greedy_rank": "median rank among the most likely sequences", "greedy_nll": "-log p(output | prompt) / G",
            "greedy_mode_nll": "-log p(mode | prompt) / G"}))


# ---- task worlds (dllm_lit.sources.ListTask): the fraction of correct answers ---------------------------------------
METRICS.append(MetricSpec(("task_accuracy",), lambda c: TaskAccuracy(c.chain), reads="stats", figures=("task_accuracy",),
                          enabled=lambda o: hasattr(getattr(o, "chain", None), "in_support"),
                          labels={"task_accuracy": "task accuracy (fraction of correct answers)"}))


def register(spec: MetricSpec) -> MetricSpec:
    """Append ``spec`` to :data:`METRICS` (its keys must be new); returns it."""
    for key in spec.keys:
        refuse_clash("metric key", key, {k for s in METRICS for k in s.keys})
    METRICS.append(spec)
    return spec


def spec_options(spec: MetricSpec, source: Any) -> Any:
    """``spec``'s options instance from ``source``: its ``metric_settings()`` (flat ``{name: value}``, the
    results writer) or its attributes; None for a spec without options."""
    if spec.options is None:
        return None
    settings = getattr(source, "metric_settings", None)
    values = settings() if callable(settings) else {k: getattr(source, k) for k in option_names(spec.options)
                                                    if hasattr(source, k)}
    return make_options(spec.options, values)


def enabled_specs(options: Any) -> list[MetricSpec]:
    """The specs enabled by ``options`` (the writer): ``enabled`` of their options instance, or of ``options``
    itself for a spec without one; in table order."""
    return [s for s in METRICS if s.enabled(options if s.options is None else spec_options(s, options))]


def metric_identity(specs: list[MetricSpec], source: Any) -> dict[str, Any]:
    """The options of ``specs`` that change their values, in one flat dict (part of the run identity)."""
    return merged_identity(spec_options(s, source) for s in specs if s.options is not None)


def interval_methods(specs: list[MetricSpec], policies: list[Policies]) -> dict[str, dict[str, Any]]:
    """``{key: {"method": ..., ...}}``: the interval method of every key of ``specs`` (their effective
    policies, one per spec, as the writer used them), for the run metadata in ``metrics.json``."""
    out: dict[str, dict[str, Any]] = {}
    for spec, policy in zip(specs, policies):
        for k in spec.keys:
            p = policy.get(k) if isinstance(policy, Mapping) else policy
            out[k] = p.describe() if p is not None else {"method": None, "reason": "no policy for this key"}
    return out


def labels() -> dict[str, str]:
    """Figure label of every registered key."""
    return {k: v for s in METRICS for k, v in s.labels.items()}


def figure_keys() -> tuple[str, ...]:
    """The keys drawn as figures, in table order of their specs."""
    return tuple(k for s in METRICS for k in s.figures)
