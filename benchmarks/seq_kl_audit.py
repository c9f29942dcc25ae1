"""Audit of the sequence-KL bracket against exact truths: is the lower end a bound, how tight is it?

For each case (a chain, a sampler, N sequences of length T) and seeds 0 .. S-1 it draws the
sampler's samples and prints, per case:

* ``truth``: the exact per-token sequence KL KL(p_s || p) / T, from a closed form or a dynamic
  program (see below); where none exists (paper-MDLM at 1 < steps < T) the column shows
  ``<=E[up]``, the mean of the upper end over the seeds, an upper bound of the truth;
* ``lcb<=truth``: share of seeds whose lower confidence bound (``seq_kl_lower_ci[0]``, level 0.95)
  is <= the truth; ``lcb<=up``: share <= that seed's ``seq_kl_upper`` point value;
* ``dv/truth``, ``lcb/truth``: mean tightness of the bound's estimate and of its confidence bound;
* ``old/truth`` and ``old>truth``: the former lower end ``trans_kl_corrected`` = (T - 1)/T
  ``kl_excess`` (paired with exact chain samples of the same seed and indices), its mean ratio and
  the share of seeds in which it exceeded the truth;
* ``ent bias``: mean error of the per-row entropy estimates of the transition entropy (plug-in,
  Miller-Madow, Chao-Shen) against the exact one, when the truth is a Markov law;
* ``cpu/seed``: process time of the lower bound per seed (s).

Exact truths: AR(beta) is a Markov chain with kernel P_beta, so KL = sum_t mu_t . KL(P_beta(.|i) ||
P(.|i)), mu_t its marginals; one-step paper-MDLM draws every position from its marginal pi, so the
law is pi^T and KL / T = (T - 1)/T (-H(pi) - sum_ij pi_i pi_j log P_ij) (infinite when P has zeros);
V = 3 cases by the dynamic program of ``dllm_lit/exact/``.

    python benchmarks/seq_kl_audit.py [--seeds 20] [--groups tiny synthetic english]

Other groups: ``bracket`` (the certified bracket's coverage; ``--sandwich-method smc`` for the SMC sandwich),
``--cases`` picks some of its cases by name), ``one_step_level`` (the sandwich's bounds at one step, one-sided at 0.95 and at 0.975, over ``--seeds`` seeds),
``english_sandwich`` (the order sandwich's tightness against K), ``smc_sandwich`` (the SMC sandwich's, paper-MDLM
on English, ``--smc-paths`` K values, ``--english-n`` sequences, ``--smc-sampler llada`` for LLaDA low-confidence,
``--smc-steps``), ``cost`` (V = 4096 profile).

The machine's load changes the cpu column only.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dllm_lit.denoisers import OracleDenoiser  # noqa: E402
from dllm_lit.markov import MarkovChain, synthetic_chain  # noqa: E402
from dllm_lit.metrics.functional.dv_bound import dv_lower_bound  # noqa: E402
from dllm_lit.metrics.functional.entropy import ENTROPY_ESTIMATORS, transition_entropy  # noqa: E402
from dllm_lit.metrics.functional.sequence_kl import sequence_kl_values, sequence_log_prob  # noqa: E402
from dllm_lit.metrics.functional.transition import transition_codes  # noqa: E402
from dllm_lit.samplers import AR, MDLM, LLaDA, MDLMPaper  # noqa: E402
from dllm_lit.samplers.ar import sharpened_rows  # noqa: E402
from dllm_lit.sources import english_char_chain  # noqa: E402

KERNEL3 = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def ar_kernel(chain: MarkovChain, beta: float) -> torch.Tensor:
    """Dense P_beta = (1 - eps) normalise(P_topK^beta) + eps nu (AR's kernel)."""
    Q = torch.zeros(chain.vocab_size, chain.vocab_size, dtype=torch.float64)
    Q.scatter_(1, chain.nbr_idx, sharpened_rows(chain, beta) * (1.0 - chain.eps))
    return Q + chain.eps * chain.nu[None, :]


def ar_truth(chain: MarkovChain, beta: float, T: int) -> float:
    """KL(p_beta || p) / T of AR(beta) (x_0 ~ pi for both)."""
    Q, P = ar_kernel(chain, beta), chain.kernel
    rows = torch.where(Q > 0, Q * (Q.clamp_min(1e-300).log() - P.clamp_min(1e-300).log()), torch.zeros_like(Q)).sum(1)
    mu, total = chain.stationary.clone(), 0.0
    for _ in range(T - 1):
        total += float(mu @ rows)
        mu = mu @ Q
    return total / T


def ar_entropy(chain: MarkovChain, beta: float, T: int) -> float:
    """The population transition entropy sum_i w_i H(P_beta(. | i)), w the pooled source law of t = 0 .. T-2."""
    Q = ar_kernel(chain, beta)
    h = -(torch.where(Q > 0, Q * Q.clamp_min(1e-300).log(), torch.zeros_like(Q))).sum(1)
    mu, w = chain.stationary.clone(), torch.zeros(chain.vocab_size, dtype=torch.float64)
    for _ in range(T - 1):
        w += mu
        mu = mu @ Q
    return float((w / (T - 1)) @ h)


def product_truth(chain: MarkovChain, T: int) -> float:
    """KL(pi^T || p) / T of one-step paper-MDLM (every position drawn from pi)."""
    pi, P = chain.stationary, chain.kernel
    if bool(((pi[:, None] * pi[None, :] > 0) & (P == 0)).any()):
        return math.inf
    cross = float((pi[:, None] * pi[None, :] * P.clamp_min(1e-300).log()).sum())
    h = -float((pi * pi.clamp_min(1e-300).log()).sum())
    return (T - 1) / T * (-h - cross)


def product_entropy(chain: MarkovChain) -> float:
    pi = chain.stationary
    return -float((pi * pi.clamp_min(1e-300).log()).sum())


def dp_truth(chain: MarkovChain, law: torch.Tensor, T: int) -> float:
    from dllm_lit.exact import chain_law

    p = chain_law(chain, T)
    keep = law > 0
    return float((law[keep] * (law[keep] / p[keep]).log()).sum()) / T


def tiny_cases():
    from dllm_lit.exact import mdlm_law

    chain = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    seqs = torch.tensor(list(itertools.product(range(3), repeat=5)))
    ar2 = AR(beta=2.0, chain=chain)
    mdlm = MDLM(OracleDenoiser(chain, dtype=torch.float64))
    one = MDLMPaper(OracleDenoiser(chain, dtype=torch.float64))
    for s in (mdlm, one):
        s.connect(chain)
    for N in (64, 512):
        yield ("V3 ar_beta2", chain, ar2, N, 5, None, dp_truth(chain, ar2.log_prob(seqs).exp(), 5), None)
        yield ("V3 mdlm s2", chain, mdlm, N, 5, 2, dp_truth(chain, mdlm_law(chain, 5, 2), 5), None)
        yield ("V3 paper s1", chain, one, N, 5, 1, product_truth(chain, 5), product_entropy(chain))
        yield ("V3 exact", chain, AR(chain=chain), N, 5, None, 0.0, ar_entropy(chain, 1.0, 5))


def synthetic_cases():
    for V, K in ((256, 32), (1024, 52)):
        chain = synthetic_chain(V, K, eps=1e-4, seed=0)
        one = MDLMPaper()
        one.connect(chain)
        for N, T in ((64, 64), (256, 256)):
            for beta in (0.9, 1.25):
                yield (f"V{V} ar_beta{beta}", chain, AR(beta=beta, chain=chain), N, T, None, ar_truth(chain, beta, T),
                       ar_entropy(chain, beta, T))
            yield (f"V{V} paper s1", chain, one, N, T, 1, product_truth(chain, T), product_entropy(chain))
            yield (f"V{V} exact", chain, AR(chain=chain), N, T, None, 0.0, ar_entropy(chain, 1.0, T))


def english_cases():
    chain = english_char_chain()
    paper = MDLMPaper()
    paper.connect(chain)
    for steps in (1, 16, 64, 128, 256):
        truth = product_truth(chain, 256) if steps == 1 else (0.0 if steps == 256 else None)
        yield (f"english paper s{steps}", chain, paper, 512, 256, steps, truth,
               product_entropy(chain) if steps == 1 else (ar_entropy(chain, 1.0, 256) if steps == 256 else None))


def run_case(name, chain, sampler, N, T, steps, truth, entropy, seeds: int) -> str:
    V = chain.vocab_size
    ref = AR(chain=chain)
    rows, cpu = [], 0.0
    for seed in range(seeds):
        x, stats = sampler.generate_with_stats(torch.arange(N), T, steps, seed)
        codes = transition_codes(x, V)
        u = stats["log_q"] - sequence_log_prob(chain, x)
        t0 = time.process_time()
        dv = dv_lower_bound(codes, chain)
        cpu += time.process_time() - t0
        lcb = dv.interval(0.95)[0]
        vals = sequence_kl_values(codes, u, chain, transition_codes(ref.generate(torch.arange(N), T, None, seed), V), dv)
        ent = {k: transition_entropy(codes, V, k) for k in ENTROPY_ESTIMATORS}
        rows.append((dv.value, lcb, vals["seq_kl_upper"], vals["trans_kl_corrected"], ent))
    ups = [r[2] for r in rows]
    ceiling = sum(ups) / len(ups)
    target = truth if truth is not None else ceiling
    frac = lambda xs: f"{100 * sum(xs) / len(xs):5.1f}%"  # noqa: E731
    ratio = (lambda v: f"{sum(v) / len(v) / target:7.3f}") if 0 < target < math.inf else (lambda v: "      -")
    ent_bias = "-"
    if entropy is not None:
        ent_bias = " ".join(f"{k}:{sum(r[4][k] for r in rows) / len(rows) - entropy:+.1e}" for k in ENTROPY_ESTIMATORS)
    truth_s = (f"{truth:9.3g}" if truth is not None else f"<={ceiling:7.3g}")
    return (f"{name:22s} {N:4d}x{T:<4d} {truth_s:>10s} {frac([r[1] <= target for r in rows])} "
            f"{frac([r[1] <= r[2] for r in rows])} {ratio([r[0] for r in rows])} {ratio([r[1] for r in rows])} "
            f"{ratio([r[3] for r in rows])} {frac([r[3] > target for r in rows])} {cpu / seeds:8.2f}  {ent_bias}")


SHARP3 = [[0.05, 0.9, 0.05], [0.05, 0.05, 0.9], [0.9, 0.05, 0.05]]


def bracket_cases():
    """(name, chain, sampler, N, T, steps, truth, upper_target): the certified bracket's cases.  ``upper_target`` is
    what seq_kl_upper's interval targets, E_o KL(q(. | o) || p) / T, where it is known (AR: the truth; one step and
    exact samplers: the truth; else None)."""
    from dllm_lit.exact import mdlm_law, mdlm_paper_law

    v3 = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    sharp = MarkovChain.from_kernel(torch.tensor(SHARP3, dtype=torch.float64))
    paper = MDLMPaper(OracleDenoiser(v3, dtype=torch.float64))
    mdlm = MDLM(OracleDenoiser(v3, dtype=torch.float64))
    exact = MDLMPaper()
    for s in (paper, mdlm, exact):
        s.connect(v3)
    seqs = torch.tensor(list(itertools.product(range(3), repeat=5)))
    for N in (8, 32, 64):
        t = ar_truth(sharp, 3.0, 6)
        yield "sharp ar_beta3", sharp, AR(beta=3.0, chain=sharp), N, 6, None, t, t
        ar2 = AR(beta=2.0, chain=v3)
        t = dp_truth(v3, ar2.log_prob(seqs).exp(), 5)
        yield "V3 ar_beta2", v3, ar2, N, 5, None, t, t
        yield "V3 paper s2", v3, paper, N, 5, 2, dp_truth(v3, mdlm_paper_law(v3, 5, 2), 5), None
        yield "V3 mdlm s2", v3, mdlm, N, 5, 2, dp_truth(v3, mdlm_law(v3, 5, 2), 5), None
        yield "V3 paper s1", v3, paper, N, 5, 1, product_truth(v3, 5), product_truth(v3, 5)
        yield "V3 exact paper s6", v3, exact, N, 6, 6, 0.0, 0.0
    for V, K in ((256, 32), (1024, 52)):
        chain = synthetic_chain(V, K, eps=1e-4, seed=0)
        for beta in (0.9, 1.25):
            t = ar_truth(chain, beta, 64)
            yield f"V{V} ar_beta{beta}", chain, AR(beta=beta, chain=chain), 64, 64, None, t, t
        one = MDLMPaper()
        one.connect(chain)
        yield f"V{V} paper s1", chain, one, 64, 64, 1, product_truth(chain, 64), product_truth(chain, 64)


def bracket_case(name, chain, sampler, N, T, steps, truth, upper_target, seeds: int, paths: int,
                 method: str = "orders") -> str:
    """Shares of seeds: certified bracket ends on the right side of the truth (and printed), seq_kl_upper's interval
    printed and covering its target, the sandwich's one-sided bounds on the right side; mean ratios; CPU."""
    from dllm_lit.metrics.functional.path_sandwich import certified_bracket, sandwich_intervals
    from dllm_lit.metrics.functional.sequence_kl import upper_interval

    V = chain.vocab_size
    sampler.sandwich_paths = paths if hasattr(sampler, "sandwich_paths") else 0
    sampler.sandwich_method = method
    exact = sampler.law_is_exact(T, steps)
    rec = {k: [] for k in ("lo", "hi", "hi_given", "ci_given", "ci_cov", "iw_lo", "iw_hi", "zero", "ratio")}
    cpu = 0.0
    for seed in range(seeds):
        x, st = sampler.generate_with_stats(torch.arange(N), T, steps, seed)
        lp = sequence_log_prob(chain, x)
        u = st["log_q"] - lp
        iw = (st["log_q_iw_lower"] - lp, st["log_q_iw_upper"] - lp) if "log_q_iw_lower" in st else (None, None)
        t0 = time.process_time()
        dv = dv_lower_bound(transition_codes(x, V), chain)
        lo, hi = certified_bracket(dv, u, iw[0], iw[1], T, 0.95, exact=exact)
        cpu += time.process_time() - t0
        ci = upper_interval(u, T, 0.95, exact=exact)
        rec["lo"].append(lo is not None and lo <= truth)
        rec["hi"].append(hi is not None and hi >= truth)
        rec["hi_given"].append(hi is not None)
        rec["ci_given"].append(ci is not None)
        if ci is not None and upper_target is not None:
            rec["ci_cov"].append(ci[0] <= upper_target <= ci[1])
        rec["zero"].append(exact and ci == (0.0, 0.0) and hi == 0.0)
        if iw[0] is not None and not exact:  # a declared exact law reads [0, 0] (the metric's rule)
            b_lo, b_hi = sandwich_intervals(iw[0], iw[1], T, 0.95)
            rec["iw_lo"].append(b_lo is not None and b_lo[0] <= truth)
            rec["iw_hi"].append(b_hi is not None and b_hi[1] >= truth)
            rec["ratio"].append((float(iw[0].mean()), float(iw[1].mean())))
    pct = lambda xs: f"{100 * sum(xs) / len(xs):5.1f}%" if xs else "     -"  # noqa: E731
    ratio = "-"
    if rec["ratio"]:
        m_lo, m_hi = (sum(r[i] for r in rec["ratio"]) / len(rec["ratio"]) for i in (0, 1))
        ratio = f"{m_lo / m_hi:6.3f}" if m_hi > 0 else "-"
    return (f"{name:20s} {N:4d}x{T:<3d} {truth:9.4g} {pct(rec['lo'])} {pct(rec['hi'])} {pct(rec['hi_given'])} "
            f"{pct(rec['ci_given'])} {pct(rec['ci_cov'])} {pct(rec['iw_lo'])} {pct(rec['iw_hi'])} {ratio:>6s} "
            f"{'yes' if exact and all(rec['zero']) else ('no' if exact else '-'):>4s} {cpu / seeds:7.2f}")


BRACKET_HEADER = (f"{'case':20s} {'N x T':8s} {'truth':>9s} {'lo<=tr':>6s} {'hi>=tr':>6s} {'hi set':>6s} "
                  f"{'ci set':>6s} {'ci cov':>6s} {'iwL<=':>6s} {'iwU>=':>6s} {'lo/up':>6s} {'zero':>4s} {'cpu/seed':>7s}")


def one_step_level(seeds: int, confidence: float = 0.95) -> None:
    """One-step paper-MDLM, where the sandwich has one path and both its ends are the exact log q(x) (the sampler's
    ``log_q``), on V = 3 (64 x 5, float64 oracle), V = 256 and 1024 (64 x 64): shares of seeds 0 .. seeds-1 whose
    skewness-corrected t bound of mean(log q - log p) / T is <= the truth (low end) and >= it (high end), one-sided
    at ``confidence`` each (the former rule) and at (1 + confidence) / 2 (``sandwich_intervals``, the metric's), and
    the mean bounds / truth."""
    from dllm_lit.metrics.functional.path_sandwich import mean_bounds

    v3 = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    cases = [("V3 paper s1", v3, OracleDenoiser(v3, dtype=torch.float64), 5)]
    cases += [(f"V{V} paper s1", synthetic_chain(V, K, eps=1e-4, seed=0), None, 64) for V, K in ((256, 32), (1024, 52))]
    for name, chain, oracle, T in cases:
        sampler, truth = MDLMPaper(oracle), product_truth(chain, T)
        sampler.connect(chain)
        u = []
        for seed in range(seeds):
            x, st = sampler.generate_with_stats(torch.arange(64), T, 1, seed)
            u.append(st["log_q"].to(torch.float64) - sequence_log_prob(chain, x))
        parts = []
        for level in (confidence, (1.0 + confidence) / 2.0):
            b = torch.tensor([mean_bounds(v, T, level) for v in u])
            parts.append(f"one-sided {level:.3f}: low <= truth {100 * float((b[:, 0] <= truth).double().mean()):5.1f}%"
                         f", high >= truth {100 * float((b[:, 1] >= truth).double().mean()):5.1f}%, mean low / high "
                         f"/ truth {float(b[:, 0].mean()) / truth:.3f} / {float(b[:, 1].mean()) / truth:.3f}")
        print(f"{name:12s} 64x{T:<3d} truth {truth:.4g}, {seeds} seeds; " + "; ".join(parts), flush=True)


def english_sandwich(paths: int, N: int = 512, T: int = 256, seed: int = 0) -> None:
    """paper-MDLM on the English chain: the sandwich's mean lower / upper per token as a function of K, with the
    rescoring CPU (process time) of the K fresh orders."""
    from dllm_lit.samplers.draws import drawn_log_prob
    from dllm_lit.samplers.path_sandwich import fresh_path_log_q

    chain = english_char_chain()
    paper = MDLMPaper()
    paper.connect(chain)
    idx = torch.arange(N)
    law = lambda j, b, p, probs, tok: drawn_log_prob(probs, tok)  # noqa: E731
    for steps in (16, 64, 128):
        x, st = paper.generate_with_stats(idx, T, steps, seed)
        lp = sequence_log_prob(chain, x)
        t0 = time.process_time()
        fresh = fresh_path_log_q(paper.denoiser, x, lambda s: paper._decode(idx, T, steps, s), steps - 1, law, seed,
                                 paths)
        cpu = time.process_time() - t0
        dv = dv_lower_bound(transition_codes(x, chain.vocab_size), chain).value
        own = st["log_q"][:, None]
        ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= paths]
        parts = []
        for k in ks:
            lo = float((torch.logsumexp(fresh[:, :k], 1) - math.log(k) - lp).mean()) / T
            hi = float((torch.logsumexp(torch.cat([own, fresh[:, : k - 1]], 1), 1) - math.log(k) - lp).mean()) / T
            parts.append(f"K={k}: {lo:.4f}/{hi:.4f}")
        print(f"english paper s{steps} {N}x{T}: dv {dv:.4f}; iw lower/upper {'; '.join(parts)}; "
              f"rescoring cpu {cpu:.1f} s for {paths} orders", flush=True)


def _llada_path(sampler, idx: torch.Tensor, T: int, steps: int, seed: int):
    """LLaDA's low-confidence samples, path law and own path (the dense replay's decode steps)."""
    from dllm_lit.decoding.reference import reference_decode
    from dllm_lit.samplers.llada_path_law import LLaDAPathLaw

    x, _ = sampler.generate_with_stats(idx, T, steps, seed)
    replay, own = torch.full_like(x, sampler.mask_id), torch.full_like(x, -1)
    reference_decode(sampler, replay, idx, steps, seed, steps_out=own)
    assert torch.equal(replay, x)
    return x, LLaDAPathLaw(sampler, T, steps), own, None


def llada_step_mass(x: torch.Tensor, law, own: torch.Tensor, seed: int, rows: int = 8) -> str:
    """Mean over the first ``rows`` sequences of sum_j log Z_j (the step mass: the probability that step j commits
    some set with x's tokens, exact) along the own path and along one path of the step-optimal proposal alone."""
    from dllm_lit.samplers.llada_esp import esp_propose, log_step_mass

    x, own = x[:rows], own[:rows]
    g = torch.Generator().manual_seed(seed)
    z_own = z_esp = torch.full_like(x, law.denoiser.mask_id)
    tot = torch.zeros(2, x.shape[0], dtype=torch.float64)
    for j in range(law.num_steps):
        tot[0] += log_step_mass(law, z_own, x, j)
        tot[1] += log_step_mass(law, z_esp, x, j)
        u = torch.rand(x.shape, generator=g, dtype=torch.float64)
        c, _ = esp_propose(law, z_esp, x, j, u, None, torch.zeros(x.shape[0], dtype=torch.bool))
        z_own, z_esp = torch.where(own == j, x, z_own), torch.where(c, x, z_esp)
    return f"sum_j log Z_j over {x.shape[0]} rows: own path {float(tot[0].mean()):.1f}, esp path {float(tot[1].mean()):.1f}"


def smc_sandwich_group(particles: list[int], N: int = 512, T: int = 256, seed: int = 0,
                       steps_list: tuple[int, ...] = (16, 64, 128), resample_below: float | None = None,
                       sampler: str = "paper", mix: float | None = None) -> None:
    """paper-MDLM (``sampler`` "paper") or LLaDA with low-confidence remasking at temperature 1 ("llada") on the
    English chain: the SMC sandwich's (``sandwich_method: smc``) mean lower / upper per token, their ratio, their
    bounds (jointly 95%) and the CPU (process time) of both ends, for each K in ``particles`` (resampling below the
    ESS fraction ``resample_below``; 0: none; None: the metric's setting; ``mix``: paper-MDLM's proposal's uniform
    share, None: the metric's ``GUIDE_MIX``)."""
    from dllm_lit.metrics.functional.path_sandwich import sandwich_intervals
    from dllm_lit.samplers import path_smc
    from dllm_lit.samplers.path_smc import smc_sandwich

    if mix is not None:
        path_smc.GUIDE_MIX = mix
    if resample_below is None:  # the metric's setting: none for paper-MDLM, LLaDA's RESAMPLE_BELOW
        from dllm_lit.samplers.llada_path_law import RESAMPLE_BELOW

        resample_below = 0.0 if sampler == "paper" else RESAMPLE_BELOW

    chain = english_char_chain()
    s = MDLMPaper() if sampler == "paper" else LLaDA(temperature=1.0)
    s.connect(chain)
    idx = torch.arange(N)
    for steps in steps_list:
        if sampler == "paper":
            x, st = s.generate_with_stats(idx, T, steps, seed)
            x, law, own, own_log_q = x, s.path_law(T, steps), s._decode(idx, T, steps, seed), st["log_q"]
        else:
            x, law, own, own_log_q = _llada_path(s, idx, T, steps, seed)
        lp = sequence_log_prob(chain, x)
        parts = []
        for k in particles:
            t0 = time.process_time()
            r = smc_sandwich(law, torch.full_like(x, s.mask_id), x, own, idx, seed, k, resample_below)
            cpu = time.process_time() - t0
            lo, hi = (float((r[key] - lp).mean()) / T for key in ("log_q_iw_lower", "log_q_iw_upper"))
            fin = float(torch.isfinite(r["log_q_iw_lower"]).double().mean())  # -inf: every proposed path impossible
            b = sandwich_intervals(r["log_q_iw_lower"] - lp, r["log_q_iw_upper"] - lp, T, 0.95)  # joint 95%
            bnd = "/".join("-" if e is None else f"{e[i]:.5f}" for i, e in enumerate(b))
            parts.append(f"K={k}: {lo:.5f}/{hi:.5f} (ratio {lo / hi:.3f}, bounds {bnd}, lower finite {fin:.2f}, "
                         f"{cpu:.1f} s)")
        own_u = "none" if own_log_q is None else f"{float((own_log_q - lp).mean()) / T:.5f}"
        if sampler == "llada":
            own_u += "; " + llada_step_mass(x, law, own, seed)
        dv = dv_lower_bound(transition_codes(x, chain.vocab_size), chain).value
        setting = f"mix {path_smc.GUIDE_MIX}, " if sampler == "paper" else ""  # LLaDA's proposal has no mix
        print(f"english {sampler} s{steps} {N}x{T} smc ({setting}resample below {resample_below}): "
              f"dv {dv:.5f}; own path {own_u}; lower/upper {'; '.join(parts)}", flush=True)


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.6f}"


def cost_profile(N: int, T: int = 1024, row: str = "ar", paths: int = 0, cache_dir: str | None = None) -> None:
    """The certified bracket's CPU at V = 4096 (K = 206, eps = 1e-4) for N sequences of one row, T = 1024: ``row``
    "ar" (AR(1.25), the DV bound alone) or "mdlm64" (MDLM at 64 steps on the exact oracle, built or loaded from
    ``cache_dir``: the whole SequenceKL compute and intervals, and the sandwich's rescoring of ``paths`` fresh
    orders).  Two rows (seeds 0, 1): the first call also builds the row-independent tilt iteration; the top
    functions (by own time) of a cProfile of the second."""
    import cProfile
    import pstats

    from dllm_lit.metrics.sequence_kl import SequenceKL

    chain = synthetic_chain(4096, 206, eps=1e-4, seed=0)
    sampler = AR(beta=1.25, chain=chain) if row == "ar" else MDLM().connect(chain, cache_dir=cache_dir)
    steps = None if row == "ar" else 64
    for rep in range(2):
        t0 = time.process_time()
        x, stats = sampler.generate_with_stats(torch.arange(N), T, steps, rep)
        sampling = time.process_time() - t0
        prof = cProfile.Profile(time.process_time) if rep else None  # CPU time, as the rest
        t0 = time.process_time()
        if prof:
            prof.enable()
        m = SequenceKL(chain)
        m.update(x, {"index": torch.arange(N), **stats})
        v, _ = m.compute(), m.own_intervals(0.95)
        if prof:
            prof.disable()
        print(f"V4096 {row} N={N} T={T} {'second row' if rep else 'first row (with the shared tilts)'}: sampling "
              f"{sampling:.1f} s, bracket {time.process_time() - t0:.1f} s CPU "
              f"[{_fmt(v['seq_kl_bracket_lo'])}, {_fmt(v['seq_kl_bracket_hi'])}]", flush=True)
    if paths and row != "ar":  # the second row again, with the sandwich: its extra CPU is the rescoring
        sampler.sandwich_paths = paths
        t0 = time.process_time()
        sampler.generate_with_stats(torch.arange(N), T, steps, 1)
        print(f"V4096 {row}: sandwich rescoring {(time.process_time() - t0 - sampling) / paths:.1f} s CPU per fresh "
              f"order ({paths} orders)", flush=True)
    stats_ = pstats.Stats(prof)
    total = stats_.total_tt
    print(f"top functions of the second row's bracket ({total:.2f} CPU s profiled):")
    top = sorted(stats_.stats.items(), key=lambda kv: -kv[1][2])[:5]
    for (file, line, fn), (_, calls, own, _, _) in top:
        print(f"  {own:6.2f} s {100 * own / total:5.1f}%  {calls:5d} calls  {Path(file).name}:{line}({fn})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--groups", nargs="+", default=["tiny", "synthetic", "english"],
                    choices=["tiny", "synthetic", "english", "bracket", "one_step_level", "english_sandwich",
                             "smc_sandwich", "cost"])
    ap.add_argument("--paths", type=int, default=8, help="fresh orders K of the sandwich")
    ap.add_argument("--english-n", type=int, default=512, help="sequences of the English sandwich groups")
    ap.add_argument("--smc-paths", type=int, nargs="+", default=[8, 16, 32],
                    help="particles K of the smc_sandwich group")
    ap.add_argument("--smc-resample", type=float, default=None, help="ESS fraction below which the smc_sandwich "
                    "group resamples (0: never; default: the metric's setting, 0 for paper, 0.5 for llada)")
    ap.add_argument("--smc-sampler", choices=["paper", "llada"], default="paper", help="the smc_sandwich group's "
                    "sampler: paper-MDLM or LLaDA low-confidence (temperature 1, one block)")
    ap.add_argument("--smc-steps", type=int, nargs="+", default=[16, 64, 128], help="steps of the smc_sandwich group")
    ap.add_argument("--smc-mix", type=float, default=None, help="the smc_sandwich group's uniform share of the pick "
                    "law (default: the metric's)")
    ap.add_argument("--sandwich-method", choices=["orders", "smc"], default="orders",
                    help="the sandwich of the bracket group (sandwich_method)")
    ap.add_argument("--cases", nargs="+", default=None, help="the bracket group's cases to run, by name (e.g. "
                    "'V3 ar_beta2' 'V1024 ar_beta1.25'); default every case")
    ap.add_argument("--cost-n", type=int, default=64, help="sequences of the V = 4096 cost profile")
    ap.add_argument("--cost-row", choices=["ar", "mdlm64"], default="ar", help="the row of the V = 4096 cost profile")
    ap.add_argument("--cost-paths", type=int, default=0, help="fresh orders rescored in the mdlm64 cost profile")
    ap.add_argument("--cache-dir", default=None, help="oracle power-table cache of the mdlm64 cost profile")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"seeds per case: {args.seeds}; level 0.95 (one-sided lower confidence bound)")
    groups = {"tiny": tiny_cases, "synthetic": synthetic_cases, "english": english_cases}
    old = [g for g in args.groups if g in groups]
    if old:
        print(f"{'case':22s} {'N x T':9s} {'truth':>10s} {'lcb<=truth':>6s} {'lcb<=up':>6s} {'dv/truth':>7s} "
              f"{'lcb/truth':>7s} {'old/truth':>7s} {'old>truth':>6s} {'cpu/seed':>8s}  entropy bias (nats)")
    for g in old:
        for case in groups[g]():
            print(run_case(*case, seeds=args.seeds), flush=True)
    if "bracket" in args.groups:
        print(f"certified bracket (95% one-sided each end), sandwich K = {args.paths} ({args.sandwich_method})")
        print(BRACKET_HEADER)
        cases = list(bracket_cases())
        unknown = sorted(set(args.cases or ()) - {c[0] for c in cases})
        if unknown:
            sys.exit(f"--cases: unknown {unknown}; allowed: {sorted({c[0] for c in cases})}")
        for case in cases:
            if args.cases and case[0] not in args.cases:
                continue
            print(bracket_case(*case, seeds=args.seeds, paths=args.paths, method=args.sandwich_method), flush=True)
    if "one_step_level" in args.groups:
        one_step_level(args.seeds)
    if "english_sandwich" in args.groups:
        english_sandwich(args.paths, N=args.english_n)
    if "smc_sandwich" in args.groups:
        smc_sandwich_group(args.smc_paths, N=args.english_n, resample_below=args.smc_resample,
                           sampler=args.smc_sampler, steps_list=tuple(args.smc_steps), mix=args.smc_mix)
    if "cost" in args.groups:
        cost_profile(args.cost_n, row=args.cost_row, paths=args.cost_paths, cache_dir=args.cache_dir)


if __name__ == "__main__":
    main()
