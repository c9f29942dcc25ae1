r"""The step-optimal proposal of the SMC sandwich for LLaDA's low-confidence path law (:mod:`llada_path_law`).

A step from z with n masked positions M of the block and k commits, target x.  Position i draws from r_i and is
ranked by (confidence c_i(v), tie key); let m be the weakest member of S (lowest (c_i(x_i), key) over S) and
G_j(m) = P_{v ~ r_j}(j's draw ranks below m's).  The sampler commits S with x's tokens with probability

    P(S) = prod_{i in S} r_i(x_i) prod_{j in M \ S} G_j(m).

Sort M by x's ranking o_1 (strongest) .. o_n.  The sets whose weakest member is m = o_t are {m} plus a (k-1)-subset
A of o_1 .. o_{t-1} (the positions ranked below m are out), so

    Z(m) = sum_{S: weakest m} P(S) = r_m(x_m) prod_{s > t} G_{o_s}(m) E_{k-1}(m),

E_c the generalised elementary symmetric polynomial of o_1 .. o_{t-1} (E[c] <- E[c] G_j(m) + E[c-1] r_j(x_j): no
division, so G = 0 (a forced member) is exact) and Z = sum_m Z(m) the step's probability summed over every set
consistent with x.  The proposal draws m from a law rho(m), then A from the conditional-Bernoulli law P(S) / Z(m)
(backward through the DP table), so r(S) = rho(m) P(S) / Z(m) and the SMC's step weight is Z(m) / rho(m): with
rho(m) = Z(m) / Z the weight is Z itself (the step-optimal proposal; Del Moral, "Feynman-Kac formulae", 2004).
Here rho(m) = (1 - TAIL) Z(m) / sum_window Z over the ``WINDOW`` highest ranks m can hold, t = k .. k + WINDOW - 1
(exact Z(m), O(WINDOW n log V + (k + WINDOW) WINDOW k) per particle and step), and TAIL uniform over the lower ranks
(every m with Z(m) > 0 stays possible; exact Z(m) for all m costs O(n^2 k)), so the weight is sum_window Z /
(1 - TAIL) when m falls in the window; the chosen m's DP and draw cost O(n V + t k).  Scaled float64 (each DP row
renormalised, its log scale carried).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.selection import rank_positions

__all__ = ["esp_propose", "log_step_mass", "WINDOW", "TAIL"]

#: candidate ranks of the weakest member whose Z(m) is computed exactly for rho (module docstring)
WINDOW = 8
#: rho's mass spread uniformly over the candidate ranks below the window (when there are any)
TAIL = 0.05


def _ranked(law, z: torch.Tensor, x: torch.Tensor, step: int):
    """The step's allowed positions of each row in x's ranking: (order [P, n] positions, valid [P, n], a = r(x),
    c(x), key [P, n], sorted confidences [P, n, V] ascending, their r's cumulative sums [P, n, V + 1])."""
    P, T = z.shape
    b, p, probs = law._rows(z, step)
    r = tempered_law(probs, law.temperature).to(torch.float64)
    r = r / r.sum(-1, keepdim=True)
    conf = probs.to(torch.float64)
    c_x = conf.gather(1, x[b, p][:, None]).squeeze(1)
    score = torch.full((P, T), -math.inf, dtype=torch.float64, device=z.device)
    score[b, p] = c_x
    where = torch.full((P, T), -1, dtype=torch.long, device=z.device)
    where[b, p] = torch.arange(b.numel(), device=z.device)
    n = int(law.allowed(z, step).sum(1).max())
    order = rank_positions(score, "lowest" if law.after == 1 else "highest")[:, :n]
    row = where.gather(1, order)
    valid, row = row >= 0, row.clamp(min=0)
    a = torch.where(valid, r.gather(1, x[b, p][:, None]).squeeze(1)[row], 0.0)
    sconf, sidx = conf[row].sort(-1)
    cum = torch.nn.functional.pad(r[row].gather(-1, sidx).cumsum(-1), (1, 0))
    return order, valid, a, c_x[row], law.after * order, sconf, cum


def _exclusion(ranked, t: torch.Tensor) -> torch.Tensor:
    """G_j(m) [P, W, n] for the candidates m at ranks ``t`` [P, W] (1 at padded positions)."""
    _, valid, _, c_x, key, sconf, cum = ranked
    theta, k_m = c_x.gather(1, t), key.gather(1, t)
    vals = theta[:, None, :].expand(-1, sconf.shape[1], -1).contiguous()
    below = torch.searchsorted(sconf, vals)  # draws of confidence < c(m)
    tied = torch.searchsorted(sconf, vals, right=True)  # ... or equal: below m when j's key is larger
    idx = torch.where(key[:, :, None] > k_m[:, None, :], tied, below)
    return torch.where(valid[:, None, :], cum.gather(-1, idx).transpose(1, 2), 1.0)


def _esp(a: torch.Tensor, G: torch.Tensor, t: torch.Tensor, k: int, table: bool = False):
    """log E_{k-1} [P, W] of the positions ranked above each candidate (ranks < ``t``), inclusion weight ``a``
    [P, n], exclusion ``G`` [P, W, n]; with ``table`` also the scaled E after each prefix and its log scales."""
    P, W, _ = G.shape
    E = torch.zeros(P, W, k, dtype=torch.float64, device=a.device)
    E[..., 0] = 1.0
    lam = torch.zeros(P, W, dtype=torch.float64, device=a.device)
    tables = [(E, lam)]
    for s in range(int(t.max())):
        new = E * G[:, :, s, None]
        new[..., 1:] += E[..., :-1] * a[:, s, None, None]
        scale = new.amax(-1)
        act = (s < t)[..., None]
        E = torch.where(act, new / scale.clamp(min=1e-300)[..., None], E)
        lam = torch.where(act[..., 0], lam + scale.log(), lam)
        if table:
            tables.append((E, lam))
    out = E[..., k - 1].log() + lam
    return (out, tables) if table else out


def _log_z(ranked, t: torch.Tensor, k: int, table: bool = False):
    """log Z(m) [P, W] for the candidates at ranks ``t`` [P, W] (and _esp's tables, and G)."""
    _, valid, a, *_ = ranked
    G = _exclusion(ranked, t)
    ranks = torch.arange(a.shape[1], device=a.device)
    below = torch.where((ranks > t[..., None]) & valid[:, None, :], G.log(), 0.0).sum(-1)
    esp = _esp(a, G, t, k, table)
    log_e, tables = esp if table else (esp, None)
    out = a.gather(1, t).log() + below + log_e
    return (out, tables, G) if table else out


def _rho(ranked, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log rho [P, n] over the weakest member's rank (-inf where impossible), the window's log Z)."""
    _, valid, a, *_ = ranked
    P, n = a.shape
    nv = valid.sum(1, keepdim=True)
    w = torch.arange(k - 1, min(n, k - 1 + WINDOW), device=a.device)
    t = w.expand(P, -1).clamp(max=n - 1)
    lz = torch.where(t < nv, _log_z(ranked, t, k), -math.inf)
    ranks = torch.arange(n, device=a.device).expand(P, n)
    tail = (ranks >= k - 1 + WINDOW) & (ranks < nv)
    n_tail = tail.sum(1, keepdim=True).to(torch.float64)
    lse = torch.logsumexp(lz, 1, keepdim=True)
    live = torch.isfinite(lse)  # a window whose every Z(m) is 0 leaves the whole mass to the tail
    one = torch.ones_like(n_tail)
    tail_mass = torch.where(live, torch.where(n_tail > 0, TAIL * one, 0.0 * one), one)
    log_rho = torch.full((P, n), -math.inf, dtype=torch.float64, device=a.device)
    log_rho[:, w] = torch.where(live, lz - lse + (1.0 - tail_mass).log(), -math.inf)
    log_rho = torch.where(tail, tail_mass.log() - n_tail.clamp(min=1).log(), log_rho)
    return log_rho, lz


def log_step_mass(law, z: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
    """log Z = log sum_m Z(m) [P] (float64): the probability that step ``step`` from ``z`` commits some set with x's
    tokens, every candidate m exact (O(n^2 k) per row: for tests and audits)."""
    k = law.counts[step]
    ranked = _ranked(law, z, x, step)
    valid = ranked[1]
    t = torch.arange(k - 1, valid.shape[1], device=z.device).expand(z.shape[0], -1)
    return torch.where(t < valid.sum(1, keepdim=True), _log_z(ranked, t, k), -math.inf).logsumexp(1)


def esp_propose(law, z: torch.Tensor, x: torch.Tensor, step: int, u: torch.Tensor, forced: torch.Tensor | None,
                forced_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(commit [P, T], log r [P]) of the proposal (module docstring) from the uniforms ``u`` [P, >= T]; rows
    ``forced_rows`` take the set ``forced`` [P, T] instead (its log r is the proposal's density of that set)."""
    P, T = z.shape
    k, allowed = law.counts[step], law.allowed(z, step)
    commit, log_r = torch.zeros_like(allowed), torch.zeros(P, dtype=torch.float64, device=z.device)
    if k == 0 or bool((allowed.sum(1) <= k).all()):
        return (allowed.clone() if k > 0 else commit), log_r
    ranked = _ranked(law, z, x, step)
    order, valid, a = ranked[:3]
    n = a.shape[1]
    rows = torch.arange(P, device=z.device)
    log_rho, _ = _rho(ranked, k)
    cdf = log_rho.exp().cumsum(1)
    t = torch.searchsorted(cdf, (u[:, 0] * cdf[:, -1])[:, None]).clamp(max=n - 1)
    mine = torch.zeros(P, n, dtype=torch.bool, device=z.device)
    if forced is not None:
        mine = forced.gather(1, order) & valid & forced_rows[:, None]
        weakest = torch.where(mine, torch.arange(n, device=z.device), -1).amax(1, keepdim=True)
        t = torch.where(forced_rows[:, None], weakest.clamp(min=0), t)
    lz, tables, G = _log_z(ranked, t, k, table=True)
    G = G[:, 0]
    take = torch.zeros(P, n, dtype=torch.bool, device=z.device)
    take[rows, t[:, 0]] = True
    need = torch.full((P,), k - 1, dtype=torch.long, device=z.device)
    for s in range(int(t.max()) - 1 if k > 1 else -1, -1, -1):  # backward through the table: include s w.p. a_s E_s[c-1] / E_{s+1}[c]
        act = (s < t[:, 0]) & (need > 0)
        (E0, l0), (E1, l1) = tables[s], tables[s + 1]
        c = need.clamp(min=1)
        num = a[:, s] * E0[:, 0].gather(1, (c - 1)[:, None]).squeeze(1) * (l0[:, 0] - l1[:, 0]).exp()
        inc = u[:, min(1 + s, u.shape[1] - 1)] * E1[:, 0].gather(1, c[:, None]).squeeze(1) < num
        inc = torch.where(forced_rows, mine[:, s], inc) & act
        take[:, s] |= inc
        need = need - inc.long()
    take = torch.where(forced_rows[:, None], mine, take) if forced is not None else take
    log_p = torch.where(take, a.log(), torch.where(valid, G.log(), 0.0)).sum(1)
    log_r = log_rho.gather(1, t).squeeze(1) + log_p - lz[:, 0]
    log_r = torch.where(torch.isfinite(lz[:, 0]), log_r, math.inf)  # Z(m) = 0: every such set has P(S) = 0
    if forced is not None:  # a retained set of the wrong size cannot be proposed: weight 0
        log_r = torch.where(forced_rows & (take.sum(1) != k), math.inf, log_r)
    commit[rows[:, None].expand(P, n)[take], order[take]] = True
    return commit, log_r
