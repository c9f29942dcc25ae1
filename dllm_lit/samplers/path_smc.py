r"""Sequential Monte Carlo over reveal states: a sandwich of a sampler's marginal log q(x) that closes with K.

For a sampler with a path law (:class:`~dllm_lit.samplers.path_law.PathLaw`), q(x) = sum over paths of
prod_j q_j(S_j | z_j) (the states z_j reveal x's tokens on S_0 .. S_{j-1}).  A particle filter over the paths that
end at x, with K particles, proposals r(S | z_j) and incremental weights w = q_j(S | z_j) / r(S | z_j), resampling
(multinomial) whenever the effective sample size falls below K / 2, gives

    Z_K = prod over resampling epochs of mean_n W_n,     E[Z_K] = q(x),  so  E[log Z_K] <= log q(x)

(Del Moral, "Feynman-Kac formulae", 2004; the lower end).  **Conditional SMC** (Andrieu, Doucet, Holenstein,
"Particle Markov chain Monte Carlo methods", 2010) keeps one particle on a given path and resamples the others
around it; with that path drawn from q(path | x) - the sampler's own path of its sample x is exactly such a draw -
its Z_K has E[log Z_K] >= log q(x) (the particle system is then drawn from the extended target, and
log Z_K - log q(x) is the log density ratio of that target to the SMC's own law: a KL >= 0), the upper end
(bidirectional Monte Carlo: Grosse, Ghahramani, Adams, "Sandwiching the marginal likelihood using bidirectional
Monte Carlo", arXiv 1511.02543).  Both ends converge to log q(x) as K grows; at K = 1 the lower end is one
proposed path's log q(x, path) - log r(path) and the upper one the own path's.

The proposal (:func:`subset_proposal`) is the conditional Bernoulli law of a k-subset of the allowed positions,
r(S | z) = prod_{i in S} w_i / e_k(w), w_i = exp(tilt_i) (the law's ``tilt``: for the random-order samplers
p(x_i | z), so r is proportional to q_j(S | z) and the weight is the same for every S: the fully adapted filter);
e_k is the elementary symmetric polynomial, computed by its recursion in log space, O(m k) per particle and step.

Randomness: the uniforms of particle n of sequence b are keyed by (seed, sequence index, end, n, step, position)
(:mod:`dllm_lit.rng`), a stream the sampler never draws from: the samples are unchanged and the estimates do not
depend on the batch size.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import rng
from dllm_lit.samplers.path_law import PathLaw

__all__ = ["PathLaw", "subset_proposal", "smc_log_q", "smc_sandwich"]

#: smallest tilt (log weight) the proposal uses, so that every allowed position stays proposable
_TILT_FLOOR = -300.0

#: particle rows per block of the proposal's recursion table (memory: rows x m x (k + 1) float64)
_ROWS = 2048


def _log_esp(lw: torch.Tensor, kmax: int) -> torch.Tensor:
    """E[i, :, r] = log e_r(w_i .. w_{m-1}) (float64 [m + 1, n, kmax + 1]) for log weights ``lw`` [n, m]."""
    n, m = lw.shape
    E = torch.full((m + 1, n, kmax + 1), -math.inf, dtype=torch.float64, device=lw.device)
    E[m, :, 0] = 0.0
    for i in range(m - 1, -1, -1):
        E[i, :, 0] = 0.0
        E[i, :, 1:] = torch.logaddexp(E[i + 1, :, 1:], lw[:, i, None] + E[i + 1, :, :-1])
    return E


def _conditional_bernoulli(lw: torch.Tensor, k: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen [n, m] bool, log e_k(w) [n]): a k-subset with P(S) = prod_{i in S} w_i / e_k(w), position i taken in
    turn with probability w_i e_{r-1}(w_{i+1..}) / e_r(w_{i..}) (r still to take), from the uniforms ``u`` [n, m]."""
    n, m = lw.shape
    kmax = int(k.max()) if n else 0
    chosen = torch.zeros((n, m), dtype=torch.bool, device=lw.device)
    log_norm = torch.empty(n, dtype=torch.float64, device=lw.device)
    for sl in (slice(a, a + _ROWS) for a in range(0, n, _ROWS)):
        E = _log_esp(lw[sl], kmax)
        rows = torch.arange(E.shape[1], device=lw.device)
        r = k[sl].clone()
        log_norm[sl] = E[0, rows, r]
        for i in range(m):
            take = (r > 0) & (u[sl, i].log() < lw[sl, i] + E[i + 1, rows, (r - 1).clamp(min=0)] - E[i, rows, r])
            chosen[sl, i] = take
            r = r - take.long()
    return chosen, log_norm


def subset_proposal(tilt: torch.Tensor, allowed: torch.Tensor, k: torch.Tensor,
                    u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(commit [P, T] bool, log w [P, T], log e_k(w) [P]) of the conditional Bernoulli proposal (module docstring)
    on the ``allowed`` positions with log weights ``tilt`` (floored), from the uniforms ``u`` [P, T]: a set S has
    log r(S) = sum_{i in S} log w_i - log e_k(w).  Where k > m - k the complement is drawn with weights 1 / w_i
    (the same law), so the recursion is O(m min(k, m - k))."""
    lw = torch.where(allowed, tilt.clamp(min=_TILT_FLOOR), torch.full_like(tilt, -math.inf))
    m = allowed.sum(1)
    flip = k > m - k
    size = torch.where(flip, m - k, k)
    order = torch.argsort((~allowed).to(torch.int8), dim=1, stable=True)[:, : int(m.max()) if m.numel() else 0]
    lwc = lw.gather(1, order)
    lwc = torch.where(flip[:, None] & torch.isfinite(lwc), -lwc, lwc)
    chosen_c, log_e = _conditional_bernoulli(lwc, size, u.gather(1, order))
    chosen = torch.zeros_like(allowed).scatter_(1, order, chosen_c)
    commit = torch.where(flip[:, None], allowed & ~chosen, chosen)
    total = torch.where(allowed, lw, torch.zeros_like(lw)).sum(1)
    log_norm = torch.where(flip, total + log_e, log_e)
    return commit, lw, log_norm


def _uniforms(keys: torch.Tensor, step: int, T: int, slot: int) -> torch.Tensor:
    return rng.uniform(keys[:, None], step, torch.arange(T, device=keys.device)[None, :], slot)


def smc_log_q(law: PathLaw, start: torch.Tensor, x: torch.Tensor, keys: torch.Tensor, particles: int,
              own: torch.Tensor | None = None) -> torch.Tensor:
    """log Z_K (float64 [B]) of the SMC over ``law``'s paths from ``start`` (the first state: the mask id where
    masked) to ``x`` [B, T] with K = ``particles`` (module docstring); ``keys`` [B]: the per-sequence keys of this
    run's uniforms; ``own``: the retained path's decode steps [B, T] (step j commits {own == j}; negative:
    revealed in ``start``) for the conditional SMC, None for the plain one."""
    B, T = x.shape
    K, dev = int(particles), x.device
    rows = torch.arange(B * K, device=dev)
    pkeys = rng.mix64(keys.repeat_interleave(K) ^ (rows % K))
    xs = x.repeat_interleave(K, 0)
    z = start.repeat_interleave(K, 0)
    kept = (rows % K == 0) if own is not None else torch.zeros(B * K, dtype=torch.bool, device=dev)
    own_rows = own.repeat_interleave(K, 0) if own is not None else None
    twist = getattr(law, "log_twist", lambda z, x: None)
    psi = twist(z, xs)
    psi = torch.zeros(B * K, dtype=torch.float64, device=dev) if psi is None else psi
    log_w = psi.view(B, K).clone()
    log_z = torch.zeros(B, dtype=torch.float64, device=dev)
    for j in range(law.num_steps):
        allowed, k = law.allowed(z, j), law.count(z, j)
        if k is None:
            raise ValueError("smc_log_q needs a path law whose schedule fixes the commits per step (count)")
        tilt = law.tilt(z, xs, j) if hasattr(law, "tilt") else torch.zeros(z.shape, dtype=torch.float64, device=dev)
        commit, lw, log_norm = subset_proposal(tilt, allowed, k, _uniforms(pkeys, j, T, 0))
        if own is not None:
            commit = torch.where(kept[:, None], own_rows == j, commit)
        log_r = torch.where(commit, lw, torch.zeros_like(lw)).sum(1) - log_norm
        inc = law.step_log_prob(z, commit, xs, j) - log_r - psi
        z = torch.where(commit, xs, z)
        psi = twist(z, xs) if j < law.num_steps - 1 else None
        psi = torch.zeros_like(inc) if psi is None else psi
        log_w = log_w + (inc + psi).view(B, K)
        if j < law.num_steps - 1:
            log_z, log_w, anc = _resample(log_w, log_z, keys, j, own is not None)
            if anc is not None:  # the own path's rows are the same within a sequence: no reindexing
                z, psi = z[anc], psi[anc]
    return log_z + torch.logsumexp(log_w, 1) - math.log(K)


def _resample(log_w: torch.Tensor, log_z: torch.Tensor, keys: torch.Tensor, step: int, conditional: bool):
    """Multinomial resampling of the sequences whose effective sample size is below K / 2: (log Z, log W,
    flat ancestors or None); particle 0 keeps its own lineage in the conditional SMC."""
    B, K = log_w.shape
    if K == 1:
        return log_z, log_w, None
    lse = torch.logsumexp(log_w, 1)
    ess = torch.exp(2 * lse - torch.logsumexp(2 * log_w, 1))
    low = ess < K / 2  # NaN (every weight -inf) is not below: such a sequence keeps its particles
    if not bool(low.any()):
        return log_z, log_w, None
    cdf = torch.softmax(log_w, 1).cumsum(1)
    u = rng.uniform(keys[:, None], step, torch.arange(K, device=keys.device)[None, :], 1) * cdf[:, -1:]
    anc = torch.searchsorted(cdf.contiguous(), u.contiguous()).clamp(max=K - 1)
    own = torch.arange(K, device=keys.device).expand(B, K)
    if conditional:
        anc[:, 0] = 0
    anc = torch.where(low[:, None], anc, own)
    log_z = torch.where(low, log_z + lse - math.log(K), log_z)
    log_w = torch.where(low[:, None], torch.zeros_like(log_w), log_w)
    return log_z, log_w, (anc + K * torch.arange(B, device=keys.device)[:, None]).reshape(-1)


def smc_sandwich(law: PathLaw, start: torch.Tensor, x: torch.Tensor, own: torch.Tensor, indices: torch.Tensor,
                 seed: int, particles: int) -> dict[str, torch.Tensor]:
    """``{"log_q_iw_lower", "log_q_iw_upper"}`` (float64 [B] each): the SMC's and the conditional SMC's log Z_K
    with K = ``particles`` for the samples ``x`` of the sequences ``indices`` of a run seeded ``seed``, ``own``
    their decode steps (the retained path).  The keys are :func:`~dllm_lit.samplers.path_sandwich.path_seed`
    (seed, 0)'s, one per end: a stream the sampler and the order sandwich never draw from."""
    from dllm_lit.samplers.path_sandwich import path_seed

    keys = rng.sequence_keys(path_seed(seed, 0), indices, rng.Stream.ORDER)
    lower = smc_log_q(law, start, x, rng.mix64(keys ^ 1), particles)
    upper = smc_log_q(law, start, x, rng.mix64(keys ^ 2), particles, own=own)
    return {"log_q_iw_lower": lower.cpu(), "log_q_iw_upper": upper.cpu()}
