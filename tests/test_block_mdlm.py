"""Block MDLM (BD3-LM's semi-AR sampler): exact law by DP, exact properties, fast path = direct loop."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.samplers import MDLM, BlockMDLM
from dllm_lit.samplers.draws import StepUniforms, categorical
from dllm_lit.decoding.nucleus import top_p_filter
from dllm_lit.exact import block_mdlm_law, chain_law, mdlm_law

V, N = 3, 20000
ALPHA = 0.01


pytestmark = pytest.mark.usefixtures("single_thread")


# (T, block_size, steps, options): both lengths, both grids, nucleus on and off, both decodings
CASES = {
    "T4_b2_s2": (4, 2, 2, {}),
    "T4_b2_s3_nucleus": (4, 2, 3, dict(nucleus_p=0.85)),
    "T4_b2_s3_stepwise_nucleus": (4, 2, 3, dict(nucleus_p=0.85, decoding="stepwise")),
    "T6_b3_s2": (6, 3, 2, {}),
    "T6_b2_s3_nucleus_mdlm_grid": (6, 2, 3, dict(nucleus_p=0.85, grid="mdlm")),
    "T6_b3_s4_total_stepwise": (6, 3, 4, dict(step_budget="total", decoding="stepwise")),
    "T4_b2_fh_nucleus": (4, 2, 2, dict(first_hitting=True, nucleus_p=0.85)),
    "T6_b3_fh_nucleus_stepwise": (6, 3, 5, dict(first_hitting=True, nucleus_p=0.85, decoding="stepwise")),
}


def dp_law(chain, T: int, bs: int, steps: int, opt: dict) -> torch.Tensor:
    S = steps // (T // bs) if opt.get("step_budget") == "total" else steps
    law, margin = block_mdlm_law(chain, T, bs, S, grid=opt.get("grid", "bd3"), nucleus_p=opt.get("nucleus_p", 1.0),
                                 first_hitting=opt.get("first_hitting", False))
    assert margin > 1e-4, f"a nucleus cumsum lies within {margin} of nucleus_p (ill-posed test)"
    return law


@pytest.mark.parametrize("name", list(CASES))
def test_law_matches_dynamic_programming(den: OracleDenoiser, name: str) -> None:
    """Pearson chi-square of N = 20000 samples against the DP law: p > 0.01 (a zero-probability sample fails)."""
    T, bs, steps, opt = CASES[name]
    law = dp_law(den.chain, T, bs, steps, opt)
    x = BlockMDLM(den, block_size=bs, **opt).sample(N, T, steps, seed=11)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_chain_samples_are_rejected(den: OracleDenoiser) -> None:
    """Power: exact chain samples fail against the 2-steps-per-block law."""
    law = dp_law(den.chain, 4, 2, 2, {})
    assert chi_square_pvalue(sequence_counts(den.chain.sample(N, 4, seed=3), V), law) < ALPHA


def test_nucleus_changes_the_law(den: OracleDenoiser) -> None:
    a, b = dp_law(den.chain, 4, 2, 3, {}), dp_law(den.chain, 4, 2, 3, dict(nucleus_p=0.85))
    assert 0.5 * (a - b).abs().sum() > 0.05


@pytest.mark.parametrize("T, bs", [(4, 2), (6, 3), (6, 2)])
def test_first_hitting_is_the_chain_law(den: OracleDenoiser, T: int, bs: int) -> None:
    """Without nucleus, one position per step chosen without looking at tokens = exact sequential sampling."""
    law, _ = block_mdlm_law(den.chain, T, bs, bs, first_hitting=True)
    assert torch.allclose(law, chain_law(den.chain, T), atol=1e-12)
    s = BlockMDLM(den, block_size=bs, first_hitting=True)
    x, nfe = s.generate_with_nfe(torch.arange(N), T, 2 * bs, seed=5)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, T)) > ALPHA
    assert torch.all(nfe == T)  # exactly one token per denoiser call


def test_first_hitting_order_is_a_permutation_per_block_and_ignores_the_chain(den: OracleDenoiser) -> None:
    from dllm_lit.markov import MarkovChain

    s = BlockMDLM(den, block_size=4, first_hitting=True)
    d = s.decode_steps(torch.arange(50), 16, 7, seed=1)
    for blk in range(4):
        local = d[:, 4 * blk: 4 * blk + 4] - 7 * blk
        assert torch.equal(local.sort(1).values, torch.arange(4).expand(50, 4))
    other = MarkovChain.from_kernel(torch.full((3, 3), 1 / 3, dtype=torch.float64))
    assert torch.equal(d, BlockMDLM(OracleDenoiser(other), block_size=4, first_hitting=True).decode_steps(
        torch.arange(50), 16, 7, seed=1))


def test_block_size_T_is_mdlm(den: OracleDenoiser) -> None:
    """grid="mdlm", one block: the DP law equals MDLM's, and both decodings equal MDLM's draw for draw."""
    for steps in (2, 5):
        law, _ = block_mdlm_law(den.chain, 4, 4, steps, grid="mdlm")
        assert torch.allclose(law, mdlm_law(den.chain, 4, steps), atol=1e-12)
    for decoding in ("ordered", "stepwise"):
        a = BlockMDLM(den, block_size=48, grid="mdlm", decoding=decoding).sample(40, 48, 9, seed=4)
        b = MDLM(den, decoding=decoding).sample(40, 48, 9, seed=4)
        assert torch.equal(a, b)


def test_block_size_T_with_bd3_grid_is_mdlm_update_on_that_grid(den: OracleDenoiser) -> None:
    """One block of the bd3 grid: the law of MDLM's ancestral update on linspace(1, 0, S), no fill."""
    law, _ = block_mdlm_law(den.chain, 4, 4, 3)
    x = BlockMDLM(den, block_size=4).sample(N, 4, 3, seed=8)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def reference_loop(s: BlockMDLM, indices: torch.Tensor, T: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Direct computation: visit every global step, query probs_at on the full current state at its positions."""
    den, M = s.denoiser, s.mask_id
    decode = s.decode_steps(indices, T, steps, seed)
    S = s.steps_per_block(T, steps)
    slots = S + (1 if s.grid == "mdlm" and not s.first_hitting else 0)
    uni = StepUniforms(seed, indices, steps)
    z = torch.full((indices.numel(), T), M, dtype=torch.long)
    nfe = torch.zeros(indices.numel(), dtype=torch.float64)
    for g in range(int(decode.max()) + 1):
        b, p = (decode == g).nonzero(as_tuple=True)
        if b.numel() == 0:
            continue
        assert bool((z[b, p] == M).all())
        probs = den.probs_at(z, b, p)
        if slots > S and g % slots == S:
            tok = probs.argmax(-1)
        else:
            tok = categorical(top_p_filter(probs, s.nucleus_p) if s.nucleus_p < 1 else probs, uni.at(g, b, p, slot=1))
        z[b, p] = tok
        nfe[b.unique()] += 1
    return z, nfe


@pytest.mark.parametrize("opt", [dict(), dict(nucleus_p=0.9), dict(grid="mdlm", nucleus_p=0.7),
                                 dict(first_hitting=True, nucleus_p=0.9), dict(step_budget="total")])
def test_ordered_fast_path_equals_reference_loop(den: OracleDenoiser, opt: dict) -> None:
    s = BlockMDLM(den, block_size=8, **opt)
    steps = 16 if opt.get("step_budget") == "total" or opt.get("first_hitting") else 5
    idx = torch.arange(30)
    x, nfe = s.generate_with_nfe(idx, 64, steps, seed=2)
    y, nfe_ref = reference_loop(s, idx, 64, steps, seed=2)
    assert torch.equal(x, y)
    assert torch.equal(nfe, nfe_ref)
    assert bool((nfe <= 64).all())


def test_stepwise_nfe_counts_steps_that_changed_the_block(den: OracleDenoiser) -> None:
    s = BlockMDLM(den, block_size=8, decoding="stepwise")
    _, nfe = s.generate_with_nfe(torch.arange(20), 32, 64, seed=0)
    assert bool((nfe <= 32).all()) and bool((nfe >= 4).all())
    _, nfe = BlockMDLM(den, block_size=8, decoding="stepwise", first_hitting=True).generate_with_nfe(
        torch.arange(20), 32, 8, seed=0)
    assert torch.all(nfe == 32)


@pytest.mark.parametrize("opt", [dict(), dict(nucleus_p=0.9, first_hitting=True), dict(decoding="stepwise", grid="mdlm")])
def test_no_mask_left(den: OracleDenoiser, opt: dict) -> None:
    """Chunking invariance of these options: tests/test_sampler_contract.py (variant:bd3_plain, bd3_first_hitting,
    bd3_stepwise_mdlm_grid)."""
    s = BlockMDLM(den, block_size=6, **opt)
    full = s.sample(12, 30, steps=7, seed=5)
    assert full.min() >= 0 and full.max() < V


def test_names(den: OracleDenoiser) -> None:
    """Bad options and runs: tests/test_sampler_contract.py (BAD_OPTIONS, BAD_RUNS, test_bad_options, test_steps)."""
    assert BlockMDLM(den).name == "bd3" and BlockMDLM(den, first_hitting=True).name == "bd3_fh"
