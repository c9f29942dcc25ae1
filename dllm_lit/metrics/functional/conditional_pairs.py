r"""Transition metrics of prompted runs against the exact conditional pair law, per prompt, averaged over prompts.

Prompt c_m (a canvas) with R_m continuations x^(r); its adjacent free pairs P_m = {t : t and t + 1 free in c_m}
(pairs that touch the prompt are left out: there the law is a position's, not a transition's).  For t in P_m the
exact law of the pair given the prompt, p_{m,t}(a, b) = p(x_t = a, x_{t+1} = b | c_m), comes from the world
(forward-backward, :meth:`~dllm_lit.markov.world_api.ExactWorld.pair_rows`), and the empirical one is
p_hat_{m,t}(a, b) = #{r : (x^(r)_t, x^(r)_{t+1}) = (a, b)} / R_m.  Per prompt, averaged over t in P_m:

    cond_pair_nll = mean_r mean_t -log p_{m,t}(x^(r)_t, x^(r)_{t+1})   (nats per pair; probabilities floored at 1e-30)
    cond_pair_kl  = mean_t sum_{ab} p_hat log(p_hat / p)                       (observed pairs)
    cond_pair_tv  = mean_t 1/2 sum_{ab} |p_hat - p| = mean_t 1/2 [sum_obs (|p_hat - p| - p) + 1]

Each value is the mean over the prompts with a free pair, with Hall's skewness-corrected t interval over them
(the prompts are independent; clipped at 0 for the three non-negative plug-ins).  ``cond_pair_kl`` and
``cond_pair_tv`` are plug-in values with R_m draws per pair law: biased upward by about (#support - 1) / (2 R_m)
even for exact samples (the floor).  ``cond_pair_kl_excess`` and ``cond_pair_tv_excess`` subtract, prompt by
prompt, the same value of the exact continuations of the same prompts (same R_m; the reference row):
E_q[plug-in] - E_p[plug-in], which is 0 for an exact sampler, with the paired interval over prompts.  Cost: one
pair row per distinct (prompt, t, x_t) drawn.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.world_api import exact_world
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval
from dllm_lit.metrics.functional.world import LOG_FLOOR

__all__ = ["PAIR_KEYS", "free_pairs", "pair_terms", "pair_values"]

PAIR_KEYS = ("cond_pair_nll", "cond_pair_kl", "cond_pair_tv", "cond_pair_kl_excess", "cond_pair_tv_excess")
Value = tuple[float | None, tuple[float, float] | None]


def free_pairs(canvases: torch.Tensor, mask_id: int) -> torch.Tensor:
    """P_m: bool [M, T - 1], True where positions t and t + 1 are both free in prompt m."""
    free = canvases == mask_id
    return free[:, :-1] & free[:, 1:]


def pair_terms(world, samples: torch.Tensor, prompt: torch.Tensor, canvases: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-prompt ``nll``, ``kl``, ``tv`` (module docstring), float64 [M] each; NaN for a prompt without a free pair."""
    w = exact_world(world)
    V, M, L = w.vocab_size, canvases.shape[0], canvases.shape[1] - 1
    x, prompt = samples.cpu().long(), prompt.cpu().long()
    F = free_pairs(canvases.cpu().long(), w.mask_id)
    n, t = F[prompt].nonzero(as_tuple=True)  # every (sequence, free pair)
    m, a, b = prompt[n], x[n, t], x[n, t + 1]
    queries, inv = torch.unique(torch.stack([m, t, a], 1), dim=0, return_inverse=True)
    p = w.pair_rows(canvases, queries[:, 0], queries[:, 1], queries[:, 2])[inv, b]
    log_p = p.clamp_min(LOG_FLOOR).log()
    ones = torch.ones(m.numel(), dtype=torch.float64)
    entries = torch.zeros(M, dtype=torch.float64).index_add_(0, m, ones)
    nll = torch.zeros(M, dtype=torch.float64).index_add_(0, m, -log_p) / entries
    # plug-in per (prompt, pair): the distinct drawn pairs with their counts
    cell = m * L + t
    pairs, first, counts = torch.unique(cell * V * V + a * V + b, return_inverse=True, return_counts=True)
    rep = torch.zeros(pairs.numel(), dtype=torch.long).scatter_(0, first, torch.arange(m.numel()))
    c_cell, c_p = pairs // (V * V), p[rep]
    reps = torch.zeros(M, dtype=torch.float64).index_add_(0, prompt, torch.ones(prompt.numel(), dtype=torch.float64))
    p_hat = counts.to(torch.float64) / reps[c_cell // L]
    log_ratio = p_hat.log() - c_p.clamp_min(LOG_FLOOR).log()
    kl = torch.zeros(M * L, dtype=torch.float64).index_add_(0, c_cell, p_hat * log_ratio)
    tv = torch.zeros(M * L, dtype=torch.float64).index_add_(0, c_cell, (p_hat - c_p).abs() - c_p)
    tv = 0.5 * (tv + F.reshape(-1).to(torch.float64))  # + 1 at every free pair
    pairs_per_prompt = F.sum(1).to(torch.float64)
    out = {"nll": nll, "kl": kl.view(M, L).sum(1) / pairs_per_prompt, "tv": tv.view(M, L).sum(1) / pairs_per_prompt}
    none = pairs_per_prompt == 0
    return {k: torch.where(none, float("nan"), v) for k, v in out.items()}


def _value(per_prompt: torch.Tensor, confidence: float, nonnegative: bool = False) -> Value:
    v = per_prompt[~per_prompt.isnan()]
    if not v.numel():
        return None, None
    lo, hi = skew_corrected_t_interval(v, confidence)
    return float(v.mean()), ((max(lo, 0.0) if nonnegative else lo), hi)


def pair_values(world, samples: torch.Tensor, prompt: torch.Tensor, canvases: torch.Tensor,
                reference_samples: torch.Tensor | None = None, confidence: float = 0.95) -> dict[str, Value]:
    """``{key: (value, (low, high))}`` over :data:`PAIR_KEYS`; the excess keys need ``reference_samples`` (exact
    continuations of the same prompts, one per sequence of ``samples``: same ``prompt``), else (None, None)."""
    if reference_samples is not None and reference_samples.shape != samples.shape:
        raise ValueError(f"reference_samples must have the shape of samples {tuple(samples.shape)}, "
                         f"got {tuple(reference_samples.shape)}")
    own = pair_terms(world, samples, prompt, canvases)
    out = {f"cond_pair_{k}": _value(own[k], confidence, nonnegative=True) for k in ("nll", "kl", "tv")}
    ref = None if reference_samples is None else pair_terms(world, reference_samples, prompt, canvases)
    for k in ("kl", "tv"):
        out[f"cond_pair_{k}_excess"] = (None, None) if ref is None else _value(own[k] - ref[k], confidence)
    return out
