"""LLaDA generate(): output law equals the exact law of its algorithm (DP), schedule, prompts, settings."""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.llada import LLaDA, prompt_law
from dllm_lit.exact import TIE_DECIMALS, PosteriorCache, chain_law, law_vector, random_subset_step
from dllm_lit.exact import proposal_options as _proposal, transfer_counts

V, T, N = 3, 4, 20000
ALPHA = 0.01


def llada_law(chain: MarkovChain, T: int, steps: int, remasking: str, temperature: float,
              block_length: int | None = None, init: dict | None = None, prompt_len: int = 0) -> torch.Tensor:
    """Exact output law of LLaDA's ``generate()`` (ML-GSAI/LLaDA: blockwise low-confidence or random remasking)
    by DP over masked states."""
    M = chain.mask_id
    post = PosteriorCache(chain)
    dist: dict = dict(init) if init is not None else {(M,) * T: 1.0}
    G = T - prompt_len
    bl = block_length or G
    nb = G // bl
    S = steps // nb
    for blk in range(nb):
        lo, hi = prompt_len + blk * bl, prompt_len + (blk + 1) * bl
        for k in transfer_counts(bl, S):
            if k == 0:
                continue
            if remasking == "random":
                dist = random_subset_step(dist, post, M, k, lambda g, i: _proposal(g[i], temperature), lo, hi)
                continue
            new: dict = defaultdict(float)
            for z, pz in dist.items():
                g = post(z)
                masked = [i for i in range(lo, hi) if z[i] == M]
                opts = {i: _proposal(g[i], temperature) for i in masked}
                for combo in itertools.product(*(opts[i] for i in masked)):
                    pr = pz * math.prod(q for _, q in combo)
                    ranked = sorted((-round(float(g[i, v]), TIE_DECIMALS), i) for i, (v, _) in zip(masked, combo))
                    chosen = {i for _, i in ranked[:k]}
                    zz = list(z)
                    for i, (v, _) in zip(masked, combo):
                        if i in chosen:
                            zz[i] = v
                    new[tuple(zz)] += pr
            dist = new
    return law_vector(dist, chain.vocab_size, T)


@pytest.mark.parametrize(
    "remasking, temperature, steps, block_length",
    [
        ("low_confidence", 1.0, 2, None),   # the paper's main LLaDA, few steps
        ("low_confidence", 1.0, 4, None),   # one token per step: still biased (most confident first)
        ("low_confidence", 0.5, 3, None),
        ("low_confidence", 1.0, 2, 2),      # two blocks, one step each
        ("low_confidence", 2.0, 4, 2),
        ("random", 0.5, 2, None),
        ("random", 1.0, 2, 2),
    ],
)
def test_law_matches_dynamic_programming(chain, den, remasking, temperature, steps, block_length) -> None:
    law = llada_law(chain, T, steps, remasking, temperature, block_length)
    s = LLaDA(den, remasking=remasking, temperature=temperature, block_length=block_length)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_few_steps_is_visibly_biased(chain) -> None:
    """Power: exact chain samples are rejected against the low-confidence laws."""
    x = chain.sample(N, T, seed=3)
    for steps in (2, 4):
        law = llada_law(chain, T, steps, "low_confidence", 1.0)
        assert chi_square_pvalue(sequence_counts(x, V), law) < ALPHA


def test_temperature_zero_is_deterministic_and_matches_dp(chain, den) -> None:
    for remasking in ("low_confidence", "random"):
        for steps in (1, 2, 4):
            s = LLaDA(den, remasking=remasking, temperature=0.0)
            x = s.sample(64, T, steps, seed=11)
            if remasking == "low_confidence":  # no randomness at all
                assert (x == x[0]).all()
                assert torch.equal(x, s.sample(64, T, steps, seed=12))
            law = llada_law(chain, T, steps, remasking, 0.0)
            if remasking == "low_confidence":
                assert law.max() == pytest.approx(1.0)
            else:
                assert chi_square_pvalue(sequence_counts(s.sample(N, T, steps, seed=steps), V), law) > ALPHA
            support = set((law > 0).nonzero().flatten().tolist())
            codes = (x * (V ** torch.arange(T - 1, -1, -1))).sum(1).tolist()
            assert set(codes) <= support


class Recorder(Denoiser):
    """Wraps a denoiser and records the state z at every query."""

    def __init__(self, inner: OracleDenoiser) -> None:
        super().__init__()
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.chain = inner.chain
        self.states: list[torch.Tensor] = []

    def forward(self, z):
        self.states.append(z.clone())
        return self.inner(z)

    def probs_at(self, z, b, p):
        self.states.append(z.clone())
        return self.inner.probs_at(z, b, p)


@pytest.mark.parametrize(
    "seq_len, steps, block_length, prompt, expected",
    [
        (12, 5, None, None, [3, 3, 2, 2, 2]),
        (12, 7, None, None, [2, 2, 2, 2, 2, 1, 1]),
        (12, 4, 6, None, [3, 3, 3, 3]),
        (12, 4, 5, [1, 2], [3, 2, 3, 2]),
        (12, 6, 4, None, [2, 2, 2, 2, 2, 2]),
    ],
)
@pytest.mark.parametrize("remasking", ["low_confidence", "random"])
def test_commits_scheduled_tokens_per_step(den, seq_len, steps, block_length, prompt, expected, remasking) -> None:
    rec = Recorder(den)
    s = LLaDA(rec, remasking=remasking, temperature=0.0, block_length=block_length, prompt=prompt)
    x = s.sample(3, seq_len, steps, seed=4)
    states = rec.states + [x]
    P = len(prompt or [])
    bl = block_length or seq_len - P
    S = steps // ((seq_len - P) // bl)
    revealed = [(z != den.mask_id).sum(1) for z in states]
    assert all((r == r[0]).all() for r in revealed)
    assert [int(b[0] - a[0]) for a, b in zip(revealed, revealed[1:])] == expected
    for j, (a, b) in enumerate(zip(states, states[1:])):
        new = (a == den.mask_id) & (b != den.mask_id)
        blk = j // S
        cols = new.nonzero()[:, 1]
        assert ((cols >= P + blk * bl) & (cols < P + (blk + 1) * bl)).all()  # only the current block
        keep = a != den.mask_id
        assert torch.equal(a[keep], b[keep])  # committed tokens never change
    assert (x != den.mask_id).all()


def test_prompt_is_fixed_and_conditions_the_law(chain, den) -> None:
    s = LLaDA(den, remasking="low_confidence", temperature=1.0, prompt=[1])
    x = s.sample(N, T, 3, seed=21)
    assert (x[:, 0] == 1).all()
    law = llada_law(chain, T, 3, "low_confidence", 1.0, init={(1, 3, 3, 3): 1.0}, prompt_len=1)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA
    y = LLaDA(den, remasking="random", temperature=1.0, prompt=[2, 0], block_length=5).sample(40, 12, 4, seed=2)
    assert (y[:, :2] == torch.tensor([2, 0])).all()


def test_prompt_pi_with_one_token_per_step_is_exact(chain, den) -> None:
    """pi prompt + random order + one token per step = exact sequential sampling of the chain."""
    s = LLaDA(den, remasking="random", temperature=1.0, prompt_mode="pi")
    x = s.sample(N, T, T - 1, seed=22)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(chain, T)) > ALPHA


@pytest.mark.parametrize("mode", ["pi_head", "pi_tail"])
def test_head_tail_prompt_draws(chain, den, mode) -> None:
    law0 = prompt_law(chain.stationary, mode)
    s = LLaDA(den, remasking="low_confidence", temperature=1.0, prompt_mode=mode)
    x = s.sample(N, T, 3, seed=23)
    assert chi_square_pvalue(torch.bincount(x[:, 0], minlength=V), law0) > ALPHA
    init = {(v, 3, 3, 3): float(law0[v]) for v in range(V) if law0[v] > 0}
    law = llada_law(chain, T, 3, "low_confidence", 1.0, init=init, prompt_len=1)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA
    # the prompt does not depend on steps: paired across the steps grid
    assert torch.equal(x[:50, 0], s.sample(50, T, 1, seed=23)[:, 0])


def test_prompt_sets_as_defined() -> None:
    pi = torch.tensor([0.05, 0.4, 0.1, 0.25, 0.2], dtype=torch.float64)
    # descending 0.4 (cum 0.4 > 0.3): nothing within 30%, plus the next -> {1}
    assert torch.allclose(prompt_law(pi, "pi_head"), torch.tensor([0, 1.0, 0, 0, 0], dtype=torch.float64))
    # ascending 0.05, 0.1 (cum 0.15) within 30%, plus the next 0.2 -> {0, 2, 4}
    assert torch.allclose(prompt_law(pi, "pi_tail"), torch.tensor([0.05, 0, 0.1, 0, 0.2], dtype=torch.float64) / 0.35)
    pi = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert torch.allclose(prompt_law(pi, "pi_head"), torch.tensor([0, 0, 0, 1.0], dtype=torch.float64))
    assert torch.allclose(prompt_law(pi, "pi_tail"), torch.tensor([0.1, 0.2, 0.3, 0], dtype=torch.float64) / 0.6)
    assert torch.allclose(prompt_law(pi, "pi"), pi)


def test_no_mask_left(den) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (config:llada, variant:llada_random_blocks,
    llada_prompt_pi_tail)."""
    for kw in ({"temperature": 1.0}, {"remasking": "random", "temperature": 0.7, "block_length": 10},
               {"temperature": 1.0, "prompt_mode": "pi_tail"}):
        s = LLaDA(den, **kw)
        full = s.sample(12, 30, steps=6, seed=5)
        assert full.min() >= 0 and full.max() < V


def test_bad_prompt_runs(den) -> None:
    """Prompts that do not fit the chain or the run (other bad options and runs: tests/test_sampler_contract.py)."""
    with pytest.raises(ValueError, match="prompt"):
        LLaDA(den, prompt=[0, 3]).sample(2, 8, 2, seed=0)  # id 3 = V is out of range
    with pytest.raises(ValueError, match="prompt"):
        LLaDA(den, prompt=[0, 1, 2]).sample(2, 2, 2, seed=0)  # longer than seq_len


def test_posterior_cache_gives_identical_draws() -> None:
    """Reusing posterior features where the nearest revealed neighbours did not change is exact."""
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain
    from dllm_lit.samplers import LLaDA

    oracle = OracleDenoiser(english_char_chain())
    for tau, block in ((1.0, None), (0.0, 16), (0.6, 32)):
        s = LLaDA(oracle, temperature=tau, block_length=block)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), (tau, block)


def test_stored_cdf_draw_equals_searchsorted() -> None:
    from dllm_lit.samplers.draws import categorical_from_cdf, categorical_from_stored_cdf

    g = torch.Generator().manual_seed(0)
    for V in (1, 2, 27, 64, 100):
        P = torch.rand(300, V, generator=g, dtype=torch.float64)
        P[P < 0.3] = 0
        P[:, 0] += 1e-3  # no empty row
        cdf = P.cumsum(-1)
        rows = torch.randint(0, 300, (4000,), generator=g)
        u = torch.rand(4000, generator=g, dtype=torch.float64)
        u[:10] = 1 - 2**-53  # the rounding edge
        k = categorical_from_stored_cdf(cdf, rows, u)
        assert torch.equal(k, categorical_from_cdf(cdf[rows], u))
        assert (P[rows, k] > 0).all()


@pytest.mark.parametrize("T, steps, temperature, block_length", [(4, 2, 0.5, None), (4, 2, 1.0, 2), (5, 3, 0.0, None)])
def test_random_subset_law_is_the_random_tie_law_of_equal_scores(chain, T, steps, temperature, block_length) -> None:
    """Two DPs of random remasking agree: the shared random-subset step (dllm_lit.exact.random_subset_step) and the
    generic score-select DP with equal scores and random ties (dllm_lit.exact.llada_law)."""
    from dllm_lit.exact import llada_law as generic_llada_law

    a = llada_law(chain, T, steps, "random", temperature, block_length)
    b = generic_llada_law(chain, T, steps, temperature, remasking="random", block_length=block_length)
    assert torch.allclose(a, b, atol=1e-12, rtol=0)
