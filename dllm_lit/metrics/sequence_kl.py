"""Floor-corrected KL, Miller-Madow-corrected entropy and KL, and the sequence-level KL bracket
(definitions in :mod:`dllm_lit.metrics.functional.sequence_kl`, the lower end's in
:mod:`dllm_lit.metrics.functional.dv_bound`, and ``docs/metrics.md``).

:class:`SequenceKL` reads each row's samples with the sampler's per-sequence statistics (its
``log_q``) and, through :meth:`SequenceKL.pair_with`, the same metric of the run's reference row
(exact chain samples, same sequence indices).  States are per-sequence (transition codes, u =
log q - log p, global index) gathered over processes; every value is computed from the states
ordered by sequence index, so DDP gives exactly the single-process values.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.markov.chain import MarkovChain
from dllm_lit.metrics.bootstrap import IntervalPolicy, SequenceBootstrapMixin
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states
from dllm_lit.metrics.functional.dv_bound import DVBound, dv_lower_bound
from dllm_lit.metrics.functional.path_sandwich import MIN_INTERVAL_N, sandwich_intervals
from dllm_lit.metrics.functional.sequence_kl import (
    SEQUENCE_KL_KEYS,
    ResampledSequenceKL,
    sequence_kl_values,
    sequence_log_prob,
    upper_interval,
)
from dllm_lit.metrics.functional.transition import transition_codes

__all__ = ["SEQUENCE_KL_INTERVALS", "SEQUENCE_KL_KEYS", "SequenceKL"]

_CENTRED = IntervalPolicy("centred")
#: kl_excess, kl_mm, trans_kl_corrected and kl_cs are differences of plug-in functionals (they may be
#: negative): centred intervals (the bootstrap spread around the estimate); entropy_mm is a plug-in
#: entropy plus its first-order bias (centred, >= 0); seq_kl_upper is a mean over sequences of a skewed
#: log-ratio: Hall's skewness-corrected Student t (dllm_lit.metrics.functional.mean_interval; the
#: percentile interval covered 93.6% at V = 3, N = 64, T = 5 over 2000 seeds), [0, 0] at an exact zero;
#: seq_kl_lower is cross-fitted over halves of the sequences, and its low end is its own one-sided lower
#: confidence bound (dllm_lit.metrics.functional.dv_bound).
SEQUENCE_KL_INTERVALS: dict[str, IntervalPolicy] = {
    "kl_excess": _CENTRED,
    "entropy_mm": IntervalPolicy("centred", lower_bound=0.0),
    "kl_mm": _CENTRED,
    "seq_kl_lower": IntervalPolicy("lower_confidence", reason="low end: one-sided lower confidence bound on the "
                                   "sequence KL per token (Student t over cross-fitted halves); high end: the "
                                   "mirror bound on the DV bound, not on the KL"),
    "seq_kl_upper": IntervalPolicy("skew_corrected_t", reason="a mean over sequences of u / T: Student t with "
                                   "Hall's skewness correction; [0, 0] for a declared exact law; none with fewer than "
                                   f"{MIN_INTERVAL_N} sequences or every u equal (a zero variance is not certainty)"),
    "seq_kl_iw_lower": IntervalPolicy("lower_confidence", reason="skewness-corrected t of the mean importance-"
                                      "weighted lower estimate; its low end with the high end of seq_kl_iw_upper's "
                                      "brackets the KL at the level (one-sided at (1 + level) / 2 each); none below "
                                      f"{MIN_INTERVAL_N} sequences or with every value equal"),
    "seq_kl_iw_upper": IntervalPolicy("skew_corrected_t", reason="skewness-corrected t of the mean sandwich upper "
                                      "estimate (seq_kl_upper's at K = 1); its high end with the low end of "
                                      "seq_kl_iw_lower's brackets the KL at the level; none below "
                                      f"{MIN_INTERVAL_N} sequences or with every value equal"),
    "seq_kl_bracket_lo": IntervalPolicy(None, reason="itself a certified one-sided confidence bound (Bonferroni over "
                                        "the DV and sandwich lower bounds)"),
    "seq_kl_bracket_hi": IntervalPolicy(None, reason="itself a certified one-sided confidence bound (Bonferroni over "
                                        "the path-level and sandwich upper ends)"),
    "trans_kl_corrected": _CENTRED,
    "kl_cs": _CENTRED,
}

_STATES = {"codes": torch.int64, "u": torch.float64, "index": torch.int64, "iw_lo": torch.float64,
           "iw_hi": torch.float64, "exact": torch.float64}
#: metric state -> the sampler statistic it holds (log q estimates of the sandwich; the declared exactness)
_STAT_OF = {"iw_lo": "log_q_iw_lower", "iw_hi": "log_q_iw_upper", "exact": "exact_law"}


class SequenceKL(SequenceBootstrapMixin, TypedCatStateMixin, Metric):
    """``update(samples[n, T], stats)`` with ``stats = {"index": int64[n], "log_q": float64[n], ...}``;
    ``compute()`` returns ``{key: float | None}`` over :data:`SEQUENCE_KL_KEYS`.

    ``kl_excess`` and ``trans_kl_corrected`` need the reference row's metric (:meth:`pair_with`;
    None without one); ``seq_kl_upper`` needs ``log_q`` for every sequence (None when the sampler
    reports NaN).  The intervals of ``seq_kl_lower`` and ``seq_kl_upper`` come from :meth:`own_intervals`,
    not from resamples.
    Memory: 8 (T - 1) + 16 bytes per sequence.
    """

    full_state_update = False
    higher_is_better = False
    is_differentiable = False
    _cat_state_specs = {name: (dtype, ()) for name, dtype in _STATES.items()}
    interval_policy = SEQUENCE_KL_INTERVALS

    def __init__(self, chain: MarkovChain, world: Any = None, confidence: float = 0.95, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the level of the certified bracket seq_kl_bracket_lo / _hi (one-sided, each end)
        self.confidence = float(confidence)
        #: ``world`` (an HMM world, whose first-order projection is ``chain``): log p(x) is the world's exact
        #: log-likelihood (forward algorithm), so seq_kl_upper bounds the sequence KL to the world; seq_kl_lower
        #: (a first-order bound) is None
        self.chain, self.world = chain, world
        self.reference: SequenceKL | None = None
        self._dv: tuple[int, DVBound] | None = None  # (sequences seen, bound) of the last compute
        self.add_state("codes", default=[], dist_reduce_fx="cat")
        self.add_state("u", default=[], dist_reduce_fx="cat")
        self.add_state("index", default=[], dist_reduce_fx="cat")
        for name in _STAT_OF:
            self.add_state(name, default=[], dist_reduce_fx="cat")
        self.add_state("length", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="max")

    def pair_with(self, reference: "SequenceKL | None") -> None:
        """The same metric on the run's reference row (exact chain samples with the same indices); may be self."""
        if reference is not None and not isinstance(reference, SequenceKL):
            raise ValueError(f"the reference must be a SequenceKL, got {type(reference).__name__}")
        self.reference = reference

    def update(self, samples: Tensor, stats: Mapping[str, Tensor]) -> None:
        if samples.dim() != 2 or samples.shape[1] < 2:
            raise ValueError(f"samples must have shape [N, T] with T >= 2, got {tuple(samples.shape)}")
        if "index" not in stats:
            raise ValueError("SequenceKL needs the global sequence index in stats['index']")
        x = samples.long().cpu()
        n, T = x.shape
        self._dv = None
        seen = int(self.length)
        if seen and seen != T:
            raise ValueError(f"SequenceKL needs one sequence length, got {seen} and {T}")
        self.length.fill_(T)
        log_q = stats.get("log_q")
        log_q = torch.full((n,), float("nan"), dtype=torch.float64) if log_q is None else log_q.to(torch.float64).cpu()
        self.codes.append(transition_codes(x, self.chain.vocab_size).reshape(-1).to(self.device))
        log_p = sequence_log_prob(self.chain, x) if self.world is None else self.world.log_prob(x)
        self.u.append((log_q - log_p).to(self.device))
        for name, key in _STAT_OF.items():
            v = stats.get(key)
            v = torch.full((n,), float("nan") if key != "exact_law" else 0.0, dtype=torch.float64) if v is None \
                else v.to(torch.float64).reshape(-1).cpu() - (log_p if key != "exact_law" else 0.0)
            getattr(self, name).append(v.to(self.device))
        self.index.append(torch.as_tensor(stats["index"]).reshape(-1).to(device=self.device, dtype=torch.int64))

    # ------------------------------------------------------------------ gathered, index-ordered states
    def _ordered(self) -> tuple[Tensor, Tensor, Tensor]:
        """(codes [N, T - 1], u [N], index [N]) over all processes, ordered by sequence index (collective)."""
        s = self._ordered_states()
        return s["codes"], s["u"], s["index"]

    def _ordered_states(self) -> dict[str, Tensor]:
        """Every state over all processes, ordered by sequence index, codes as [N, T - 1] (collective)."""
        with synced_cat_states(self, _STATES) as s:
            states, T = {k: s[k].cpu() for k in _STATES}, int(self.length)
        if states["index"].numel() == 0:
            raise EmptyMetricError("SequenceKL: no sequence was seen")
        order = torch.argsort(states["index"], stable=True)
        states = {k: (v.reshape(-1, T - 1) if k == "codes" else v)[order] for k, v in states.items()}
        return states

    def _all(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """(codes, u, reference codes or None), index-ordered (collective, also on the reference)."""
        codes, u, index = self._ordered()
        if self.reference is None:
            return codes, u, None
        if self.reference is self:
            return codes, u, codes
        ref_codes, _, ref_index = self.reference._ordered()
        if not torch.equal(ref_index, index):
            raise ValueError("the reference row must hold the same sequence indices as the row it is paired with")
        return codes, u, ref_codes

    def _dv_bound(self, codes: Tensor) -> DVBound:
        """The DV bound of the index-ordered codes, computed once per state (compute and interval share it)."""
        if self._dv is None or self._dv[0] != codes.shape[0]:
            self._dv = (codes.shape[0], dv_lower_bound(codes, self.chain))
        return self._dv[1]

    def compute(self) -> dict[str, float | None]:
        codes, u, ref = self._all()
        s = self._ordered_states()
        first_order = self.world is None
        return sequence_kl_values(codes, u, self.chain, ref, self._dv_bound(codes) if first_order else None,
                                  first_order=first_order, sandwich=(s["iw_lo"], s["iw_hi"]),
                                  exact=bool((s["exact"] > 0).all()), confidence=self.confidence)

    def own_intervals(self, confidence: float) -> dict[str, tuple[float, float]]:
        """``{"seq_kl_lower", "seq_kl_upper", "seq_kl_iw_lower", "seq_kl_iw_upper": (lower, upper)}`` at level
        ``confidence`` (collective under DDP): one-sided confidence bounds of the DV bound (not in an HMM world, where
        the bound is not defined), the interval of :func:`upper_interval` (not without log q, below MIN_INTERVAL_N
        sequences or with every u equal) and the sandwich's two intervals (:func:`sandwich_intervals`: the low end of
        the lower one and the high end of the upper one bracket the truth together at ``confidence``; [0, 0] for a
        declared exact law)."""
        s = self._ordered_states()
        codes, u, T = s["codes"], s["u"], s["codes"].shape[1] + 1
        exact = bool((s["exact"] > 0).all())
        out = {}
        upper = upper_interval(u, T, confidence, exact=exact)
        if upper is not None:
            out["seq_kl_upper"] = upper
        iw = sandwich_intervals(s["iw_lo"], s["iw_hi"], T, confidence)
        for key, b in zip(("seq_kl_iw_lower", "seq_kl_iw_upper"), iw):
            b = (0.0, 0.0) if exact and upper == (0.0, 0.0) else b
            if b is not None:
                out[key] = b
        if self.world is None:
            out["seq_kl_lower"] = self._dv_bound(codes).interval(confidence)
        return out

    def reset(self) -> None:
        super().reset()
        self._dv = None

    # ------------------------------------------------------------------ interval protocol
    def sequence_statistics(self) -> dict[str, Tensor]:
        """Per-sequence states in gathered order (the bootstrapper orders them by index), with the
        reference row's codes aligned to the same sequences (``ref_codes``, when paired)."""
        with synced_cat_states(self, _STATES) as s:
            codes, index, T = s["codes"].cpu(), s["index"].cpu(), int(self.length)
        codes = codes.reshape(-1, max(T - 1, 1))
        out = {"codes": codes}
        if self.reference is self:
            out["ref_codes"] = codes
        elif self.reference is not None:
            ref_codes, _, ref_index = self.reference._ordered()
            pos = torch.searchsorted(ref_index, index).clamp(max=max(ref_index.numel() - 1, 0))
            if ref_index.numel() != index.numel() or not torch.equal(ref_index[pos], index):
                raise ValueError("the reference row must hold the same sequence indices as the row it is paired with")
            out["ref_codes"] = ref_codes[pos]
        return out

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> ResampledSequenceKL:
        return ResampledSequenceKL(statistics["codes"], self.chain, statistics.get("ref_codes"),
                                   first_order=self.world is None)
