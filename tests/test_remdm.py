"""ReMDM's output law equals the exact law of its algorithm (DP over partially masked states).

The DP below is written independently of ``dllm_lit.samplers.remdm``: kernel in the alpha form
of ReMDM Eq. 6, the nucleus filter of ``dllm_lit.exact`` (not the package's), float64 forward-backward
posteriors.  For conf the state carries each decoded position's frozen confidence, so a state is a
tuple of (token, psi) pairs.
"""
from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import MDLM
from dllm_lit.samplers.schedules import time_grid
from dllm_lit.samplers.remdm import ReMDM
from dllm_lit.exact import PosteriorCache, argmax_fill_law, law_vector, nucleus_row, product_step

V, T, N = 3, 4, 20000
ALPHA = 0.01
SEED = 2024


pytestmark = pytest.mark.usefixtures("single_thread")


# ---------------------------------------------------------------------- exact law (DP)
def alphas(variant: str, t: float, s: float, opt: dict) -> tuple[float, float, float]:
    """(alpha_t, alpha_s, sigma) of the ReMDM kernel, docs/samplers/remdm.md (conf: the budget times eta_i)."""
    def smax(a_t: float, a_s: float) -> float:
        return 1.0 if a_t == 0 else min(1.0, (1 - a_s) / a_t)

    if variant == "loop":
        t_on, t_off, a_on = opt.get("t_on", 0.55), opt.get("t_off", 0.05), opt.get("alpha_on", 0.9)
        eta = opt.get("eta", 0.02)
        if t > t_on:
            return (1 - t) * a_on / (1 - t_on), min(1.0, (1 - s) * a_on / (1 - t_on)), 0.0
        if t > t_off:
            return a_on, a_on, min(eta, smax(a_on, a_on))
        return 1 - t * (1 - a_on) / t_off, 1 - s * (1 - a_on) / t_off, 0.0
    a_t, a_s = 1 - t, 1 - s
    if variant == "cap":
        return a_t, a_s, min(opt["eta"], smax(a_t, a_s))
    if variant == "rescale":
        return a_t, a_s, opt["eta"] * smax(a_t, a_s)
    cap = opt.get("eta_cap")
    return a_t, a_s, smax(a_t, a_s) if cap is None else min(cap, smax(a_t, a_s))


def remdm_law(chain: MarkovChain, steps: int, variant: str, top_p: float = 1.0, remask: bool = True,
              **opt) -> tuple[torch.Tensor, float]:
    """Exact output law over V^T sequences and the smallest nucleus margin met (remask=False: sigma = 0)."""
    M = chain.mask_id
    post = PosteriorCache(chain)
    margin = [math.inf]
    filt: dict = {}

    def filtered(toks: tuple[int, ...]) -> list[list[float]]:
        if toks not in filt:
            g = post(toks)
            rows = []
            for i in range(T):
                row, mg = nucleus_row(g[i].tolist(), top_p)
                if toks[i] == M:
                    margin[0] = min(margin[0], mg)
                rows.append(row)
            filt[toks] = rows
        return filt[toks]

    ts = time_grid(steps).tolist()
    dist: dict = {((M, None),) * T: 1.0}
    for j in range(steps):
        a_t, a_s, sig = alphas(variant, ts[j], ts[j + 1], opt)
        sig = sig if remask else 0.0

        def options(state):
            toks = tuple(v for v, _ in state)
            q = filtered(toks)
            if variant == "conf":
                w = [math.exp(-c) if v != M else 0.0 for v, c in state]
                tot = sum(w)
                sig_i = [sig * x / tot if tot > 0 else 0.0 for x in w]
                sig_m = 0.0
            else:
                sig_i, sig_m = [sig] * T, sig
            pu = (a_s - (1 - sig_m) * a_t) / (1 - a_t)
            out = []
            for i, (v, c) in enumerate(state):
                if v != M:
                    out.append([((v, c), 1 - sig_i[i]), ((M, None), sig_i[i])])
                else:
                    out.append([((M, None), 1 - pu)]
                               + [((w, q[i][w] if variant == "conf" else None), q[i][w] * pu) for w in range(V) if q[i][w] > 0])
            return out

        dist = product_step(dist, options)
    tokens: dict = defaultdict(float)
    for state, pr in dist.items():
        tokens[tuple(v for v, _ in state)] += pr
    return law_vector(argmax_fill_law(tokens, post), V, T), margin[0]


CASES = {
    "cap": dict(variant="cap", steps=4, eta=0.5),
    "rescale": dict(variant="rescale", steps=4, eta=0.6, top_p=0.85),
    "conf": dict(variant="conf", steps=4, top_p=0.85),
    "conf_p1": dict(variant="conf", steps=3),
    "conf_cap": dict(variant="conf", steps=4, eta_cap=0.4, top_p=0.85),
    "loop": dict(variant="loop", steps=6, eta=0.3, t_on=0.6, t_off=0.2, alpha_on=0.5, top_p=0.85),
    # phase 2 sigma capped at (1 - alpha_on)/alpha_on = 0.25
    "loop_capped": dict(variant="loop", steps=6, eta=0.5, t_on=0.6, t_off=0.2, alpha_on=0.8),
    # paper window on a coarse grid: alpha(s) > 1 in phase 1 is clamped to 1
    "loop_coarse": dict(variant="loop", steps=3, eta=0.1),
}


def split(case: dict) -> tuple[str, int, dict]:
    case = dict(case)
    return case.pop("variant"), case.pop("steps"), case


@pytest.fixture(scope="module")
def laws(chain: MarkovChain) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (exact law, exact law of the same algorithm with sigma = 0)."""
    out = {}
    for name, case in CASES.items():
        variant, steps, opt = split(case)
        law, margin = remdm_law(chain, steps, variant, **opt)
        assert margin > 1e-4, f"{name}: a nucleus cumsum lies within {margin} of top_p (ill-posed test)"
        assert abs(law.sum().item() - 1.0) < 1e-9
        out[name] = law, remdm_law(chain, steps, variant, remask=False, **opt)[0]
    return out


def make(den: OracleDenoiser, case: dict) -> tuple[ReMDM, int]:
    variant, steps, opt = split(case)
    opt.setdefault("top_p", 1.0)
    return ReMDM(den, steps=steps, variant=variant, **opt), steps


@pytest.mark.parametrize("name", list(CASES))
def test_law_matches_dynamic_programming(den: OracleDenoiser, laws: dict, name: str) -> None:
    sampler, steps = make(den, CASES[name])
    x = sampler.sample(N, T, steps, seed=SEED)
    assert x.min() >= 0 and x.max() < V
    assert chi_square_pvalue(sequence_counts(x, V), laws[name][0]) > ALPHA


@pytest.mark.parametrize("name", list(CASES))
def test_remasking_changes_the_law(laws: dict, name: str) -> None:
    """The chi-square test has power against ignoring the remasking (noncentrality at N samples)."""
    law, no_remask = laws[name]
    assert 0.5 * (law - no_remask).abs().sum().item() > 0.01
    assert N * ((law - no_remask) ** 2 / no_remask.clamp_min(1e-12)).sum().item() > 150


@pytest.mark.parametrize("name", ["cap", "conf_p1", "loop"])
def test_samples_without_remasking_are_rejected(den: OracleDenoiser, laws: dict, name: str) -> None:
    variant, steps, opt = split(CASES[name])
    if variant == "conf":  # sigma = 0 conf is the MDLM kernel (+ nucleus) = cap with eta = 0
        variant = "cap"
    opt.pop("eta", None)
    opt.setdefault("top_p", 1.0)
    x = ReMDM(den, variant=variant, eta=0.0, **opt).sample(N, T, steps, seed=SEED)
    assert chi_square_pvalue(sequence_counts(x, V), laws[name][1]) > ALPHA
    assert chi_square_pvalue(sequence_counts(x, V), laws[name][0]) < ALPHA


# ---------------------------------------------------------------------- draw-for-draw with MDLM
@pytest.mark.parametrize("variant", ["cap", "rescale"])
def test_sigma_zero_is_mdlm_draw_for_draw(variant: str) -> None:
    g = torch.Generator().manual_seed(0)
    P = torch.rand(6, 6, generator=g, dtype=torch.float64) ** 3
    den = OracleDenoiser(MarkovChain.from_kernel(P / P.sum(1, keepdim=True)))
    remdm = ReMDM(den, variant=variant, eta=0.0, top_p=1.0)
    mdlm = MDLM(den, decoding="stepwise")  # upstream's literal loop; "ordered" has the same law, other draws
    for steps in (1, 7, 64):
        a = remdm.sample(16, 50, steps, seed=11)
        b = mdlm.sample(16, 50, steps, seed=11)
        assert torch.equal(a, b)


# ---------------------------------------------------------------------- invariances
@pytest.mark.parametrize("variant", ["conf", "loop", "cap", "rescale"])
def test_no_mask_left_and_generator_seeding(den: OracleDenoiser, variant: str) -> None:
    """Chunking invariance (pieces, one sequence alone): tests/test_sampler_contract.py (config:remdm_conf,
    remdm_loop, variant:remdm_cap, remdm_rescale)."""
    eta = None if variant == "conf" else 0.05
    s = ReMDM(den, variant=variant, eta=eta, top_p=0.9)
    assert s.name == f"remdm_{variant}"
    full = s.sample(12, 30, steps=9, seed=5)
    assert full.dtype == torch.long and full.shape == (12, 30)
    assert full.min() >= 0 and full.max() < V
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(s.sample(3, 10, 4, g1), s.sample(3, 10, 4, g2))


def test_paper_defaults() -> None:
    s = ReMDM(variant="loop")
    assert (s.eta, s.t_on, s.t_off, s.alpha_on, s.top_p, s.schedule) == (0.02, 0.55, 0.05, 0.9, 0.9, "linear")
    assert ReMDM(variant="cap").eta == 0.008 and ReMDM(variant="rescale").eta == 0.015
    conf = ReMDM()
    assert conf.variant == "conf" and conf.eta_cap is None
    # conf: the per-step budget is sigma_max = min(1, (1 - alpha_s) / alpha_t)
    assert conf.step_rates(0.5, 0.25) == (0.5, 0.25, 0.5)
    assert conf.step_rates(1.0, 0.5)[2] == 1.0


# ---------------------------------------------------------------------- bad settings
# the bad options and runs themselves: tests/test_sampler_contract.py (BAD_OPTIONS, test_bad_options, test_steps)
def test_bad_settings_fail_before_sampling(den: OracleDenoiser) -> None:
    s = ReMDM(den, variant="cap", eta=0.1)
    s.top_p = 1.5
    with pytest.raises(ValueError, match="top_p"):
        s.sample(2, 4, 2, seed=0)
    s = ReMDM(den, variant="loop")
    s.t_off = 0.9
    with pytest.raises(ValueError, match="t_off"):
        s.sample(2, 4, 2, seed=0)
