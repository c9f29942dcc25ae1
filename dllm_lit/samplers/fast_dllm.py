"""Fast-dLLM's confidence-aware parallel decoding (NVlabs/Fast-dLLM ``llada/generate.py``); see
``docs/samplers/confidence.md``.

Wu et al., "Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache and
Parallel Decoding" (arXiv:2505.22618).

Blocks of ``block_length`` positions are decoded left to right.  At each step every masked position
i of the current block gets LLaDA's proposal x̂_i (argmax at temperature 0, else a draw from
p_i^(1/tau)) and the confidence c_i = p_i(x̂_i); the masked positions are ranked by c (ties by
``tie_rule``) and the first n commit, with

* threshold rule (``get_transfer_index``): n = max(1, #{i : c_i >= tau}) - every proposal at least
  as confident as tau, and always the most confident one;
* factor rule (``get_transfer_index_dynamic``): with c_(1) >= c_(2) >= ... the sorted confidences
  of the m masked positions, n is the length of the leading run of ranks r with
  c_(r) >= 1 - f / (r + 1) (rank 1 always passes); upstream then takes all m when the run stops
  at rank m - 1 (only the last rank fails) - kept as upstream does.

A block runs until it has no mask left, so the number of steps, and of denoiser evaluations, is
adaptive: :meth:`FastDLLM.generate_with_nfe` counts them per sequence.  ``steps`` does not change
the algorithm; it only keys the randomness, so a steps grid gives independent replicates (upstream
still asserts ``steps % num_blocks == 0`` in this mode; not required here, so any grid runs).
With a threshold above every confidence it commits one token per step and equals
``LLaDA(steps=seq_len)`` draw for draw (same uniforms).

The sampler is a rule (:mod:`dllm_lit.samplers.rule`): LLaDA's proposal and confidence
(:class:`~dllm_lit.samplers.llada.LLaDA`) with an adaptive count; the engine owns the loop, the
posterior provider and the per-sequence NFE.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.decoding import with_tie_rule
from dllm_lit.samplers.llada import LLaDA

__all__ = ["FastDLLM", "threshold_count", "factor_count", "factor_decided"]


def threshold_count(sorted_conf: torch.Tensor, threshold: float) -> torch.Tensor:
    """n = max(1, #{c >= threshold}) per row of descending confidences [B, L] (-inf = no position)."""
    return (sorted_conf >= threshold).sum(1).clamp(min=1)


def factor_count(sorted_conf: torch.Tensor, num_masked: torch.Tensor, factor: float) -> torch.Tensor:
    """Fast-dLLM's dynamic count: leading ranks r (1-based) with c_(r) >= 1 - factor/(r+1), rank 1
    always; all m masked positions when the run covers at least m - 1 ranks (upstream's loop exit)."""
    L = sorted_conf.shape[1]
    r = torch.arange(1, L + 1, dtype=torch.float64, device=sorted_conf.device)
    thresh = factor_thresholds(L, factor, sorted_conf.device)
    passed = (sorted_conf >= thresh[None, :]) & (r[None, :] <= num_masked[:, None])
    lead = passed.long().cumprod(1).sum(1)
    return torch.where(lead >= num_masked - 1, num_masked, lead)


def factor_thresholds(L: int, factor: float, device: torch.device) -> torch.Tensor:
    """1 - factor/(r+1) for ranks r = 1..L (float64), rank 1's set to -1 (always passes)."""
    r = torch.arange(1, L + 1, dtype=torch.float64, device=device)
    thresh = 1.0 - factor / (r + 1.0)
    thresh[0] = -1.0
    return thresh


def factor_decided(top: torch.Tensor, known: torch.Tensor, rest: torch.Tensor, n_masked: torch.Tensor,
                   factor: float) -> torch.Tensor:
    """Whether :func:`factor_count` is fixed by the ``known`` exact first entries of ``top`` and ``rest`` >= every
    other score (:meth:`~dllm_lit.samplers.rule.RuleSampler.count_decided`): a known rank r <= m fails, or every
    rank is known, or every known rank passes and rank known + 1, at most ``rest``, fails."""
    L = top.shape[1]
    thresh = factor_thresholds(L, factor, top.device)
    r = torch.arange(1, L + 1, device=top.device)[None, :]
    passed = (top >= thresh[None, :]) & (r <= torch.minimum(known, n_masked)[:, None])
    lead = passed.long().cumprod(1).sum(1)
    fails_known = lead < torch.minimum(known, n_masked)
    next_fails = rest < thresh[known.clamp(max=L - 1)]
    return fails_known | (known >= n_masked) | next_fails


class FastDLLM(LLaDA):
    """Fast-dLLM threshold / factor parallel decoding (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: keys the randomness only (a grid gives replicates).
        threshold: tau in (0, 1] for the threshold rule (upstream's example 0.9); None with ``factor``.
        factor: f > 0 for the factor rule (upstream default 1.0); None for the threshold rule.
        block_length: block length dividing T (None: one block); upstream's examples use 32.
        temperature: 0 = argmax proposals (upstream's evaluations); tau > 0 samples p^(1/tau).
        tie_rule: order of equal confidences ("lowest", "highest", "random").
    """

    sampler_name = "fast_dllm"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 threshold: float | None = 0.9, factor: float | None = None, block_length: int | None = 32,
                 temperature: float = 0.0, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps, temperature=temperature, block_length=block_length, tie_rule=tie_rule)
        if (threshold is None) == (factor is None):
            raise ValueError(f"give exactly one of threshold and factor, got threshold={threshold!r}, factor={factor!r}")
        self.threshold = None if threshold is None else checks.probability("threshold", threshold)
        self.factor = None if factor is None else checks.real("factor", factor, 0.0, low_open=True)

    @property
    def name(self) -> str:
        if self.factor is not None:
            base = "fast_dllm_factor" if self.factor == 1 else f"fast_dllm_factor{self.factor:g}"
        else:
            base = "fast_dllm" if self.threshold == 0.9 else f"fast_dllm_t{self.threshold:g}"
        return with_tie_rule(base, self.tie_rule)

    def adaptive_count(self, sorted_scores: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
        if self.factor is not None:
            return factor_count(sorted_scores, n_masked, self.factor)
        return threshold_count(sorted_scores, self.threshold)

    def count_decided(self, top: torch.Tensor, known: torch.Tensor, rest: torch.Tensor,
                      n_masked: torch.Tensor) -> torch.Tensor:
        if self.factor is not None:
            return factor_decided(top, known, rest, n_masked, self.factor)
        return rest < self.threshold  # every confidence >= tau is known; the rest cannot add one
