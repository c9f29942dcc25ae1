r"""The path law of LLaDA with low-confidence remasking (:class:`~dllm_lit.samplers.llada.LLaDA`), for the SMC sandwich.

At step j (block [lo, hi), k_j commits) from the state z, every masked position l of the block draws a proposal
v_l ~ r_l = p_l^(1/tau) / sum_v p_l(v)^(1/tau) independently (p_l the denoiser's row at z), scores it by its
confidence c_l(v_l) = p_l(v_l) (float64 of the row's value, as :meth:`LLaDA.score`), and the k_j first positions of
the ranking (score descending, equal scores by ``tie_rule``: lower position first for "lowest", higher for
"highest") commit their proposals.  That ranking is a strict total order on (score, position), so the step commits
exactly the set S with x's tokens there iff every i in S proposes x_i and every other masked position l of the block
ranks after the weakest member s* of S (its lowest score c*, among equal ones the position ranked last).  The
positions' proposals are independent, so

    q_j(S, x_S | z) = prod_{i in S} r_i(x_i) * prod_{l masked in block, l not in S} P_{v ~ r_l}(l ranks after s*)

with  P(l ranks after s*) = sum_v r_l(v) [p_l(v) < c*  or  (p_l(v) = c*  and  l after s* by the tie rule)]

(exact comparisons of the same floats the sampler ranks: ties decided by the rule, never by rounding).

Path-scorable: temperature > 0 with ``tie_rule`` "lowest" or "highest" (:func:`path_law_reason` says why not
otherwise: at temperature 0 the path is a deterministic function of the run, and the random tie rule couples the
positions of a tied group).  The SMC's step proposal (:meth:`LLaDAPathLaw.propose`) is a mixture: with probability
ESP_SHARE the step-optimal law q_j(S | z, x) (:mod:`~dllm_lit.samplers.llada_esp`: the weakest member, then a
conditional-Bernoulli subset by an elementary-symmetric-polynomial DP), else :meth:`LLaDAPathLaw._scan`, which mimics
the sampler (the allowed positions in the ranking of x's tokens, position i taken with the odds that it proposed
x_i rather than a token ranked below it); the density is the mixture's at the drawn set.  The step-optimal law alone
is myopic: on the English chain its particles drift into states where a masked position's confident token is not
x's, which every later step pays for, and its upper end is looser than the scan's; the scan alone often proposes a
set of step probability 0 (its particles die, the lower end reads -inf).  Mixed, with resampling below ESS
RESAMPLE_BELOW K (dead particles replaced), both ends are finite (docs/metrics.md has the figures).  No twist.
"""
from __future__ import annotations

import math

import torch

from dllm_lit.decoding import reference_decode
from dllm_lit.samplers.draws import drawn_log_prob, tempered_law
from dllm_lit.samplers.llada_esp import esp_propose
from dllm_lit.samplers.path_law import RandomSubsetLaw
from dllm_lit.samplers.selection import rank_positions

__all__ = ["LLaDAPathLaw", "path_law_reason", "with_smc_sandwich", "SCAN_FLOOR", "ESP_SHARE", "RESAMPLE_BELOW"]

#: the scan proposal's take probabilities are kept in [SCAN_FLOOR, 1 - SCAN_FLOOR] (every k-subset stays possible)
SCAN_FLOOR = 0.01
#: the step-optimal component's share of the proposal mixture (LLaDAPathLaw.propose)
ESP_SHARE = 0.6
#: ESS fraction below which the sandwich resamples (the scan's draws of step probability 0 die, the survivors split)
RESAMPLE_BELOW = 0.5


def path_law_reason(sampler) -> str | None:
    """Why ``sampler`` (a LLaDA) has no computable path law, or None when it has one."""
    if sampler.remasking != "low_confidence":
        return "LLaDAPathLaw is low-confidence remasking's law (random remasking: RandomSubsetLaw)"
    if sampler.temperature <= 0:
        return "temperature 0 (argmax proposals) has no path law to sum: use temperature > 0"
    if sampler.tie_rule not in ("lowest", "highest"):
        return f"tie_rule {sampler.tie_rule!r} couples tied positions: the path law needs 'lowest' or 'highest'"
    return None


def smc_refusal(sampler) -> str | None:
    """LLaDA's :meth:`~dllm_lit.samplers.base.Sampler.sandwich_refusal`: low-confidence remasking asked for the SMC
    sandwich without a path law (random remasking keeps the order sandwich)."""
    if sampler.sandwich_paths > 0 and sampler.sandwich_method == "smc" and sampler.remasking != "random":
        reason = path_law_reason(sampler)
        return None if reason is None else f"sandwich_method 'smc' needs LLaDA's path law: {reason}"
    return None


class LLaDAPathLaw(RandomSubsetLaw):
    """Step law of LLaDA's low-confidence remasking over reveal states (module docstring) for ``sampler`` at
    (``seq_len``, ``steps``): one step per entry of the blocks' transfer counts (steps committing 0 included); the
    windows and counts (``allowed``, ``count``) are those of :class:`RandomSubsetLaw`, the step law is not."""

    def __init__(self, sampler, seq_len: int, steps: int) -> None:
        reason = path_law_reason(sampler)
        if reason is not None:
            raise ValueError(f"LLaDA path law: {reason}")
        blocks, counts = sampler.block_schedule(seq_len, steps)
        super().__init__(sampler.denoiser, [k for c in counts for k in c],
                         [blk for blk, c in zip(blocks, counts) for _ in c], log_law=None)
        self.temperature = sampler.temperature
        self.after = 1 if sampler.tie_rule == "lowest" else -1  # rank key: a larger key ranks later among ties
        self._memo = None

    def guide(self, z: torch.Tensor, x: torch.Tensor) -> None:
        """No twist (the chain's p(x's masked tokens | z) is not LLaDA's law), no pick guide: :meth:`propose`."""
        return None

    def _rows(self, z: torch.Tensor, step: int):
        """(b, p, rows [n, V]) at the step's allowed positions of z (memoised for the last z asked)."""
        if self._memo is not None and self._memo[0] is z and self._memo[1] == step:
            return self._memo[2]
        b, p = self.allowed(z, step).nonzero(as_tuple=True)
        out = (b, p, self.denoiser.probs_at(z, b, p))
        self._memo = (z, step, out)
        return out

    def step_log_prob(self, z: torch.Tensor, commit: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
        B = z.shape[0]
        allowed = self.allowed(z, step)
        ok = ~(commit & ~allowed).any(1) & (commit.sum(1) == self.counts[step])
        out = torch.zeros(B, dtype=torch.float64, device=z.device)
        if self.counts[step] > 0 and bool(allowed.any()):
            b, p, probs = self._rows(z, step)
            law = tempered_law(probs, self.temperature).to(torch.float64)
            law = law / law.sum(-1, keepdim=True)
            conf = probs.to(torch.float64)  # the sampler's score of every proposal v
            xi, in_s = x[b, p], commit[b, p]
            c_x = conf.gather(1, xi[:, None]).squeeze(1)
            c_star = torch.full((B,), math.inf, dtype=torch.float64, device=z.device)
            c_star = c_star.scatter_reduce(0, b[in_s], c_x[in_s], "amin")
            key = self.after * p
            at_min = in_s & (c_x == c_star[b])
            k_star = torch.full((B,), -(1 << 62), dtype=torch.long, device=z.device)
            k_star = k_star.scatter_reduce(0, b[at_min], key[at_min], "amax")  # the weakest member's rank key
            cs = c_star[b][:, None]
            later = (conf < cs) | ((conf == cs) & (key > k_star[b])[:, None])
            term = torch.where(in_s, drawn_log_prob(tempered_law(probs, self.temperature), xi),
                               (law * later).sum(1).log())
            out = out.index_add(0, b, term)
        return torch.where(ok, out, torch.full_like(out, -math.inf))

    def propose(self, z: torch.Tensor, x: torch.Tensor, step: int, u: torch.Tensor, forced: torch.Tensor | None,
                forced_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(commit [P, T], log r [P]): the SMC's step proposal, the mixture ESP_SHARE * esp + (1 - ESP_SHARE) * scan
        of :func:`~dllm_lit.samplers.llada_esp.esp_propose` (the step-optimal law) and :meth:`_scan` (the sampler's
        ranking); u[:, 0] picks the component and is rescaled to a fresh uniform for it; log r is the mixture's
        density at the set (both components evaluated there)."""
        lam = ESP_SHARE
        pick_esp = u[:, 0] < lam
        v = u.clone()
        v[:, 0] = torch.where(pick_esp, u[:, 0] / lam, (u[:, 0] - lam) / (1.0 - lam)).clamp(0.0, 1.0 - 1e-16)
        if lam >= 1.0:
            return esp_propose(self, z, x, step, v, forced, forced_rows)
        c_scan, _ = self._scan(z, x, step, v, forced, forced_rows)
        have = forced_rows | ~pick_esp
        pre = c_scan if forced is None else torch.where(forced_rows[:, None], forced, c_scan)
        commit, lr_e = esp_propose(self, z, x, step, v, pre, have)
        _, lr_s = self._scan(z, x, step, v, commit, torch.ones_like(have))
        lr_e = torch.where(lr_e == math.inf, -math.inf, lr_e)  # a set esp cannot propose (P(S) = 0)
        lr_s = torch.where(lr_s == math.inf, -math.inf, lr_s)  # a set the scan cannot propose
        log_r = torch.logaddexp(math.log(lam) + lr_e, math.log1p(-lam) + lr_s)
        return commit, torch.where(log_r == -math.inf, math.inf, log_r)

    def _scan(self, z: torch.Tensor, x: torch.Tensor, step: int, u: torch.Tensor, forced: torch.Tensor | None,
                forced_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(commit [P, T], log r [P]): the SMC's proposal of the step's set (module docstring): the allowed positions
        scanned in the sampler's ranking of x's tokens (c_i(x_i) descending, ties by the rule), each taken with
        probability a_i = r_i(x_i) / (r_i(x_i) + P_{v ~ r_i}(c_i(v) < c_i(x_i))) clamped to [SCAN_FLOOR,
        1 - SCAN_FLOOR], until k are taken (all of the rest when only as many remain); uniforms ``u`` [P, >= T];
        rows ``forced_rows`` take the set ``forced`` [P, T] instead (its log r is still the proposal's)."""
        P, T = z.shape
        k, allowed = self.counts[step], self.allowed(z, step)
        commit, log_r = torch.zeros_like(allowed), torch.zeros(P, dtype=torch.float64, device=z.device)
        n = allowed.sum(1)
        if k == 0 or bool((n <= k).all()):
            return (allowed.clone() if k > 0 else commit), log_r
        b, p, probs = self._rows(z, step)
        law = tempered_law(probs, self.temperature).to(torch.float64)
        law = law / law.sum(-1, keepdim=True)
        conf = probs.to(torch.float64)
        xi = x[b, p]
        c_x, r_x = conf.gather(1, xi[:, None]).squeeze(1), law.gather(1, xi[:, None]).squeeze(1)
        below = (law * (conf < c_x[:, None])).sum(1)
        take = torch.zeros(P, T, dtype=torch.float64, device=z.device)
        take[b, p] = (r_x / (r_x + below)).clamp(SCAN_FLOOR, 1.0 - SCAN_FLOOR)
        score = torch.full((P, T), -math.inf, dtype=torch.float64, device=z.device)
        score[b, p] = c_x
        order = rank_positions(score, "lowest" if self.after == 1 else "highest")
        rows = torch.arange(P, device=z.device)
        need = torch.full((P,), k, dtype=torch.long, device=z.device)
        for t in range(int(n.max())):
            left = n - t  # allowed positions not yet scanned, this one included
            if not bool((need > 0).any()):
                break
            col = order[:, t]
            a = take[rows, col]
            free = (need > 0) & (need < left)
            inc = torch.where(free, u[:, t] < a, need >= left) & (need > 0) & (left > 0)
            if forced is not None:
                inc = torch.where(forced_rows, forced[rows, col] & (left > 0), inc)
            log_r = log_r + torch.where(free, torch.where(inc, a, 1.0 - a).log(), 0.0)
            commit[rows, col] |= inc
            need = need - inc.long()
        if forced is not None:  # a retained set the scan cannot give (more than k taken, or too few): weight 0
            log_r = torch.where(forced_rows & (need != 0), math.inf, log_r)
        return commit, log_r

def with_smc_sandwich(sampler, generate, indices: torch.Tensor, seq_len: int, steps: int,
                      seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``generate(indices, seq_len, steps, seed)``'s (x, stats), plus the SMC sandwich's ``log_q_iw_lower`` /
    ``log_q_iw_upper`` when ``sampler.sandwich_method`` is "smc" with ``sandwich_paths`` K > 0 (a LLaDA without a
    path law is refused in one line before sampling).  The retained path is the sampler's own: the run replayed by
    the dense provider (identical draws), recording each position's step; a drawn prompt token's log q
    (``prompt_mode``) is added to both ends."""
    K = int(sampler.sandwich_paths)
    smc = K > 0 and sampler.sandwich_method == "smc"
    if smc_refusal(sampler) is not None:
        raise ValueError(smc_refusal(sampler))
    x, stats = generate(indices, seq_len, steps, seed)
    if not smc:
        return x, stats
    from dllm_lit.samplers.path_smc import smc_sandwich

    log_q0 = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    start = sampler.initial_state(indices, seq_len, seed, log_q=log_q0)
    replay, own = start.clone(), torch.full(x.shape, -1, dtype=torch.long, device=x.device)
    reference_decode(sampler, replay, indices, steps, seed, steps_out=own)
    if not torch.equal(replay, x):
        raise RuntimeError("LLaDA's dense replay differs from its samples: the own path is unknown")
    out = smc_sandwich(LLaDAPathLaw(sampler, seq_len, steps), start, x, own, indices, seed, K, RESAMPLE_BELOW)
    stats.update({key: v + log_q0.sum(1).cpu() for key, v in out.items()})
    return x, stats
