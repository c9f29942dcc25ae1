r"""Importance-weighted path sandwich of a sampler's marginal log q(x), for samplers whose order ignores the tokens.

A sampler whose unmasking order o is drawn independently of the tokens has the marginal law

    q(x) = sum_o q(o) q(x | o),       q(x | o) = prod_i q_i(x_i | x revealed before i)

(``log_q`` records log q(x | o*) along the sampler's own order o*).  With K orders o_1 .. o_K drawn afresh from
the sampler's own order law q(o) (the proposal r(o | x) = q(o): the weight of an order is q(x | o)),

    L_K(x) = log (1/K) sum_k q(x | o_k)           E[L_K] <= log q(x), rising with K
                                                   (Burda, Grosse, Salakhutdinov, arXiv 1509.00519);
    U_K(x) = log (1/K) [q(x | o*) + sum_{k<K} q(x | o_k)]   E[U_K] >= log q(x), falling with K

since (x, o*) is an exact draw of the joint, so o* is an exact draw of q(o | x) (the sandwich of Grosse,
Ghahramani, Adams, "Sandwiching the marginal likelihood using bidirectional Monte Carlo", arXiv 1511.02543).
U_1 = log q(x | o*): today's path-level upper end.  Both are per-sequence numbers; their means minus log p(x)
bracket KL(q || p) (:mod:`dllm_lit.metrics.functional.path_sandwich`).

Rescoring x along an order teacher-forces it through the sampler's own step law
(:func:`~dllm_lit.samplers.reference_scoring.teacher_forced_log_q`: the exact oracle's nearest-revealed-neighbour
rows, O(T V) per order and sequence).  Fresh orders are keyed by (seed, sequence, k) through :func:`path_seed`,
a stream the sampler never draws from, so the samples are unchanged.

For many-step samplers the uniform orders close slowly; ``sandwich_method: smc`` replaces them by the sequential Monte
Carlo over reveal states of :mod:`dllm_lit.samplers.path_smc` where the sampler has a path law (paper-MDLM).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from dllm_lit import rng
from dllm_lit.samplers.reference_scoring import LogLaw, teacher_forced_log_q

__all__ = ["SANDWICH_STATS", "add_sandwich", "path_seed", "fresh_path_log_q", "sandwich_stats"]

#: the per-sequence statistics :func:`sandwich_stats` adds (log q estimates, nats)
SANDWICH_STATS = ("log_q_iw_lower", "log_q_iw_upper")

#: offset of the sandwich's order seeds (the sampler's own orders use ``seed`` itself)
_SANDWICH_SALT = 0x5A4D_5157


def path_seed(seed: int, k: int) -> int:
    """The seed of fresh order k (k >= 1) for a run seeded ``seed``: a 63-bit SplitMix64 mix of both."""
    h = rng.mix64(torch.tensor([(int(seed) * 1_000_003 + _SANDWICH_SALT + int(k)) & ((1 << 63) - 1)]))
    return int(h.item()) & ((1 << 62) - 1)


def fresh_path_log_q(denoiser, x: torch.Tensor, order: Callable[[int], torch.Tensor], num_steps: int,
                     log_law: LogLaw, seed: int, paths: int) -> torch.Tensor:
    """log q(x | o_k) for k = 1 .. ``paths`` fresh orders ``order(path_seed(seed, k))`` (decode steps [B, T]):
    float64 [B, paths] (-inf where the order gives x probability 0)."""
    out = torch.empty((x.shape[0], paths), dtype=torch.float64)
    for k in range(paths):
        decode = order(path_seed(seed, k + 1))
        out[:, k] = teacher_forced_log_q(denoiser, x, decode, num_steps, log_law, floor=False).sum(1).cpu()
    return out


def sandwich_stats(denoiser, x: torch.Tensor, own_log_q: torch.Tensor, order: Callable[[int], torch.Tensor],
                   num_steps: int, log_law: LogLaw, seed: int, paths: int) -> dict[str, torch.Tensor]:
    """``{"log_q_iw_lower": L_K, "log_q_iw_upper": U_K}`` (float64 [B] each, module docstring) with K = ``paths``
    fresh orders for L_K and the own order plus K - 1 fresh ones for U_K."""
    fresh = fresh_path_log_q(denoiser, x, order, num_steps, log_law, seed, paths)
    own = own_log_q.to(torch.float64).cpu()
    lower = torch.logsumexp(fresh, 1) - math.log(paths)
    upper = torch.logsumexp(torch.cat([own[:, None], fresh[:, : paths - 1]], 1), 1) - math.log(paths)
    return {"log_q_iw_lower": lower, "log_q_iw_upper": upper}


def add_sandwich(sampler, stats: dict[str, torch.Tensor], x: torch.Tensor, order: Callable[[int], torch.Tensor],
                 num_steps: int, log_law: LogLaw, seed: int, path_law: Callable[[], object] | None = None,
                 indices: torch.Tensor | None = None, start: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """``stats`` plus the sandwich when ``sampler.sandwich_paths`` > 0 (``stats["log_q"]``: the own order's):
    :func:`sandwich_stats` over fresh orders, or with ``sampler.sandwich_method == "smc"`` and a ``path_law``
    (a :class:`~dllm_lit.samplers.path_law.PathLaw` factory) the SMC sandwich over reveal states
    (:func:`~dllm_lit.samplers.path_smc.smc_sandwich`, K particles, the own path retained, from ``start``: the
    first state, e.g. with a prompt; None: every position masked)."""
    K = int(sampler.sandwich_paths)
    if K > 0 and getattr(sampler, "sandwich_method", "orders") == "smc" and path_law is not None:
        from dllm_lit.samplers.path_smc import smc_sandwich

        start = torch.full_like(x, sampler.denoiser.mask_id) if start is None else start
        stats.update(smc_sandwich(path_law(), start, x, order(seed), indices, seed, K))
    elif K > 0:
        stats.update(sandwich_stats(sampler.denoiser, x, stats["log_q"], order, num_steps, log_law, seed, K))
    return stats
