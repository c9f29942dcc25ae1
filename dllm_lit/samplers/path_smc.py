r"""Sequential Monte Carlo over reveal states: a sandwich of a sampler's marginal log q(x) that closes with K.

For a sampler with a path law (:class:`~dllm_lit.samplers.path_law.PathLaw`), q(x) = sum over paths of
prod_j q_j(S_j | z_j) (the states z_j reveal x's tokens on S_0 .. S_{j-1}).  K particles walk the paths that end at
x, each step drawn from a proposal r(S | z_j) and weighted by w = q_j(S | z_j) psi(z_{j+1}) / (r(S | z_j) psi(z_j))
(a twist psi, the law's ``log_twist``, telescopes out along a path: the exact chain's p(x's masked tokens | z) for the
oracle), with multinomial resampling of a sequence's particles whenever their effective sample size falls below
``resample_below`` K.  Then

    Z_K = prod over resampling epochs of mean_n W_n,     E[Z_K] = q(x),  so  E[log Z_K] <= log q(x)

(Del Moral, "Feynman-Kac formulae", 2004; the lower end).  **Conditional SMC** (Andrieu, Doucet, Holenstein,
"Particle Markov chain Monte Carlo methods", 2010) keeps particle 0 on a given path and resamples the others around
it; with that path drawn from q(path | x) - the sampler's own path of its sample x is exactly such a draw - the
particle system is drawn from the extended target, log Z_K - log q(x) is the log density ratio of that target to the
SMC's own law, and E[log Z_K] >= log q(x): the upper end (the sandwich of Grosse, Ghahramani, Adams, "Sandwiching
the marginal likelihood using bidirectional Monte Carlo", arXiv 1511.02543).  Both ends converge to log q(x) as K
grows.  At K = 1 the lower end is one proposed path's log q(x, path) / r(path), the upper one the own path's.

The proposal (:func:`subset_proposal`) picks a step's k positions one at a time: pick t takes position i with
probability proportional to (1 - GUIDE_MIX) g_t(i) / sum g_t + GUIDE_MIX / (positions left), g_t(i) =
p(x_i | z) / p(x_i | z and the earlier picks) (the law's ``tilt``), the factor by which the step's earlier picks
change i's law: for a random-order sampler on the exact oracle, q_j(S | z) psi(z + S) / psi(z) = C(m, k)^{-1}
prod_t g_t(s_t), so the guided pick follows the twisted target and avoids co-revealing dependent positions; the
uniform part keeps the own path's density away from 0 (the upper end pays KL(q(path | x) || r)).  The pick order is
an auxiliary variable with a uniform target law (1 / k!).  Resampling is off by default (``resample_below = 0``:
sequential importance sampling with this proposal): with the chain's twist it selected particles whose past
co-reveals were cheap and whose remaining ones are dear, and loosened both ends on the English chain
(``benchmarks/seq_kl_audit.py --groups smc_sandwich``; docs/metrics.md).

Randomness: the uniforms of particle n of sequence b are keyed by (seed, sequence index, end, n, step, position)
(:mod:`dllm_lit.rng`), a stream the sampler never draws from: the samples are unchanged and the estimates do not
depend on the batch size.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import rng
from dllm_lit.samplers.path_law import PathLaw, path_seed

__all__ = ["PathLaw", "subset_proposal", "smc_log_q", "smc_sandwich"]

#: weight of the uniform pick in the proposal's defensive mixture (module docstring).  On the English chain (paper-MDLM,
#: 64 x 256, K = 16; ``benchmarks/seq_kl_audit.py --groups smc_sandwich --english-n 64 --smc-paths 16 --smc-mix m``)
#: m = 0.3 / 0.5 / 0.7 gave mean lower / upper 0.79 / 0.84 / 0.85 at 16 steps and 0.92 / 0.82 / 0.72 at 128
GUIDE_MIX = 0.5

#: particle rows (sequences x K) per pass: [rows, T] working tensors that stay in the CPU's caches (16384 rows of
#: T = 256 took 4.5x the time of 8192 on the English audit)
PARTICLE_ROWS = 4096


def subset_proposal(guide, allowed: torch.Tensor, k: torch.Tensor, u: torch.Tensor,
                    forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(commit [P, T] bool, log r [P], guided): k positions of ``allowed`` picked one at a time (module docstring),
    pick t taking i with probability proportional to g_t(i) = exp(tilt_i before the step - tilt_i now) mixed with
    the uniform pick (``guide``: its ``tilt``, updated by ``reveal`` after each pick; None: uniform picks), from the
    uniforms ``u`` [P, >= k].  The pick order is an auxiliary variable whose target law is uniform (1 / k!), so the
    returned log r is that of the picks in their order plus log k!: q(S) / r is then the weight.  Rows of ``forced``
    (long [P, k], -1 in free rows) pick the given positions instead (their log r is still the proposal's).  Where
    every row commits all its allowed positions that is the only set (log r = 0) and the guide is not told
    (``guided`` False)."""
    P, T = allowed.shape
    log_r = torch.zeros(P, dtype=torch.float64, device=allowed.device)
    if bool((k == allowed.sum(1)).all()):
        return allowed.clone(), log_r, False
    rows = torch.arange(P, device=allowed.device)
    base = None if guide is None else guide.tilt.clone()
    commit, avail = torch.zeros_like(allowed), allowed.clone()
    for t in range(int(k.max())):
        active = t < k
        m = avail.sum(1, keepdim=True).to(torch.float64)
        if base is None or t == 0:  # the first pick's g is 1 everywhere
            prob = avail / m
        else:  # the guided pick g / sum g, mixed with the uniform one (GUIDE_MIX)
            g = torch.where(avail, (base - guide.tilt).clamp(max=700.0).exp(), 0.0)
            prob = (1.0 - GUIDE_MIX) * g / g.sum(1, keepdim=True) + GUIDE_MIX * avail / m
        cdf = prob.cumsum(1)
        pick = torch.searchsorted(cdf, (u[:, t] * cdf[:, -1])[:, None]).squeeze(1).clamp(max=T - 1)
        if forced is not None:
            pick = torch.where(forced[:, t] >= 0, forced[:, t], pick)
        p_pick = torch.where(avail[rows, pick], prob[rows, pick] / cdf[:, -1], 0.0)
        # a pick of probability 0 (a float edge of the search) gets log r = +inf: the particle's weight is 0
        log_r = log_r + torch.where(active, torch.where(p_pick > 0, p_pick.log(), math.inf), 0.0)
        r, c = rows[active], pick[active]
        commit[r, c] = True
        avail[r, c] = False
        if guide is not None:
            guide.reveal(r, c)
    return commit, log_r + torch.lgamma(k.to(torch.float64) + 1), True


def _forced_order(own: torch.Tensor, step: int, keys: torch.Tensor, kmax: int) -> torch.Tensor:
    """The retained path's commits at ``step`` in a uniformly random order (keyed), as [P, kmax] (-1 padded)."""
    T = own.shape[1]
    score = torch.where(own == step, _uniforms(keys, step, T, 3), torch.full(own.shape, 2.0, device=own.device))
    order = torch.argsort(score, 1)[:, :kmax]
    return torch.where(score.gather(1, order) < 2.0, order, -1)


def _uniforms(keys: torch.Tensor, step: int, n: int, slot: int) -> torch.Tensor:
    return rng.uniform(keys[:, None], step, torch.arange(n, device=keys.device)[None, :], slot)


def smc_log_q(law: PathLaw, start: torch.Tensor, x: torch.Tensor, keys: torch.Tensor, particles: int,
              own: torch.Tensor | None = None, resample_below: float = 0.0) -> torch.Tensor:
    """log Z_K (float64 [B]) of the SMC over ``law``'s paths from ``start`` (the first state: the mask id where
    masked) to ``x`` [B, T] with K = ``particles`` (module docstring); ``keys`` [B]: the per-sequence keys of this
    run's uniforms; ``own``: the retained path's decode steps [B, T] (step j commits {own == j}; negative:
    revealed in ``start``) for the conditional SMC, None for the plain one; ``resample_below``: the ESS fraction
    below which a sequence's particles are resampled (0: never)."""
    B, T = x.shape
    K, dev = int(particles), x.device
    rows = torch.arange(B * K, device=dev)
    pkeys = rng.mix64(keys.repeat_interleave(K) ^ (rows % K))
    xs = x.repeat_interleave(K, 0)
    z = start.repeat_interleave(K, 0)
    kept = (rows % K == 0) if own is not None else torch.zeros(B * K, dtype=torch.bool, device=dev)
    own_rows = own.repeat_interleave(K, 0) if own is not None else None
    guide = law.guide(z, xs) if hasattr(law, "guide") else None
    psi = torch.zeros(B * K, dtype=torch.float64, device=dev) if guide is None else guide.log_twist.clone()
    log_w = psi.view(B, K).clone()
    log_z = torch.zeros(B, dtype=torch.float64, device=dev)
    for j in range(law.num_steps):
        allowed, k = law.allowed(z, j), law.count(z, j)
        if k is None:
            raise ValueError("smc_log_q needs a path law whose schedule fixes the commits per step (count)")
        forced = None
        if own is not None and not hasattr(law, "propose"):
            forced = torch.where(kept[:, None], _forced_order(own_rows, j, pkeys, int(k.max())), -1)
        if hasattr(law, "propose"):  # the law's own step proposal (a confidence sampler's ranking scan)
            mine = None if own is None else kept[:, None] & (own_rows == j)
            commit, log_r = law.propose(z, xs, j, _uniforms(pkeys, j, T, 0), mine, kept)
            guided = True
        else:
            commit, log_r, guided = subset_proposal(guide, allowed, k, _uniforms(pkeys, j, int(k.max()), 0), forced)
        inc = law.step_log_prob(z, commit, xs, j) - log_r - psi
        z = torch.where(commit, xs, z)
        last = j == law.num_steps - 1
        if guide is not None and not guided and not last:
            guide = law.guide(z, xs)
        psi = torch.zeros_like(inc) if guide is None or last else guide.log_twist.clone()
        log_w = log_w + (inc + psi).view(B, K)
        if not last:
            log_z, log_w, anc = _resample(log_w, log_z, keys, j, own is not None, resample_below)
            if anc is not None:  # the own path's rows are the same within a sequence: no reindexing
                z, psi = z[anc], psi[anc]
                if guide is not None:
                    guide.select(anc)
    return log_z + torch.logsumexp(log_w, 1) - math.log(K)


def _resample(log_w: torch.Tensor, log_z: torch.Tensor, keys: torch.Tensor, step: int, conditional: bool,
              below: float):
    """Multinomial resampling of the sequences whose effective sample size is below ``below`` K: (log Z, log W,
    flat ancestors or None); particle 0 keeps its own lineage in the conditional SMC."""
    B, K = log_w.shape
    if K == 1 or below <= 0:
        return log_z, log_w, None
    lse = torch.logsumexp(log_w, 1)
    ess = torch.exp(2 * lse - torch.logsumexp(2 * log_w, 1))
    low = ess < below * K  # NaN (every weight -inf) is not below: such a sequence keeps its particles
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
                 seed: int, particles: int, resample_below: float = 0.0) -> dict[str, torch.Tensor]:
    """``{"log_q_iw_lower", "log_q_iw_upper"}`` (float64 [B] each): the SMC's and the conditional SMC's log Z_K
    with K = ``particles`` for the samples ``x`` of the sequences ``indices`` of a run seeded ``seed``, ``own``
    their decode steps (the retained path).  The keys are :func:`~dllm_lit.samplers.path_law.path_seed`
    (seed, 0)'s, one per end: a stream the sampler and the order sandwich never draw from."""

    keys = rng.sequence_keys(path_seed(seed, 0), indices, rng.Stream.ORDER)
    lower, upper = [], []
    step = max(1, PARTICLE_ROWS // int(particles))
    for sl in (slice(a, a + step) for a in range(0, x.shape[0], step)):  # sequences are independent: same numbers
        lower.append(smc_log_q(law, start[sl], x[sl], rng.mix64(keys[sl] ^ 1), particles,
                               resample_below=resample_below))
        upper.append(smc_log_q(law, start[sl], x[sl], rng.mix64(keys[sl] ^ 2), particles, own[sl], resample_below))
    return {"log_q_iw_lower": torch.cat(lower).cpu(), "log_q_iw_upper": torch.cat(upper).cpu()}
