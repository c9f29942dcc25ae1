"""P2 path planning: its output law against the exact law of its algorithm (a DP over partially masked states,
enumerating each step's joint proposals and the Plackett-Luce law of the kept set), on the tiny chain and on a
tiny HMM world; NFE = S calls; determinism."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import HMMOracleDenoiser
from dllm_lit.samplers import P2
from dllm_lit.samplers.p2 import masked_after
from dllm_lit.exact import chain_law, law_vector
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)
from test_wino import loo_row, tempered

pytestmark = pytest.mark.usefixtures("single_thread")
V = 3
#: The goodness-of-fit design, fixed before any run (none of it was tuned to a result).  Every law test draws
#: N = 50000 sequences with SEED = 0.  For a correct sampler the chi-square p-value is uniform (cells with fewer than
#: 5 expected counts pooled), so each law test fails with probability ALPHA = 1e-3 under any re-randomisation of the
#: draws, the module's five together with at most 0.5 %.  Power at this N: samples against the chain's law and
#: against the law of a neighbouring setting (Gumbel scale 2 instead of 1, L1 distance 0.08) must be rejected at the
#: same level (test_power_the_law_is_not_the_chain_law).
N, SEED, ALPHA = 50000, 0, 1e-3


def kept_set_laws(weights: list[float], k: int) -> dict[frozenset, float]:
    """P(the k largest of log w_j + Gumbel form the set A) for every |A| = k: the Plackett-Luce law of the first
    k picks without replacement with probabilities proportional to ``weights``, summed over their orders.  Once only
    zero weights (keys -inf) remain, the sampler's stable ranking keeps the highest positions among them."""
    n, total = len(weights), sum(weights)
    law = {frozenset(): 1.0}
    for _ in range(k):
        nxt: dict[frozenset, float] = {}
        for a, pa in law.items():
            rest = total - sum(weights[j] for j in a)
            if not any(weights[j] > 0 for j in range(n) if j not in a):
                key = a | {max(j for j in range(n) if j not in a)}
                nxt[key] = nxt.get(key, 0.0) + pa
                continue
            for j in range(n):
                if j not in a and weights[j] > 0:
                    key = a | {j}
                    nxt[key] = nxt.get(key, 0.0) + pa * weights[j] / rest
        law = nxt
    return law


def p2_law(den, T: int, S: int, tau: float, eta: float, scale: float, planner: str = "z") -> torch.Tensor:
    """Exact law of P2 (scale > 0) by a DP over partially masked states, step by step.  A revealed position j weighs
    p(z_j | z_{-j}) (``planner="z"``, the sampler) or p(z_j | x0_{-j}) given the proposal sequence x0, no MASK
    (``planner="proposals"``, what upstream's planner is fed)."""
    M = V
    dist = {(M,) * T: 1.0}
    for i in range(1, S + 1):
        keep = T - masked_after(T, S, i)
        nxt: dict[tuple, float] = {}
        for z, pz in dist.items():
            rows = [loo_row(den, z, j) for j in range(T)]
            mset = [j for j in range(T) if z[j] == M]
            laws = [tempered(rows[j], tau) for j in mset]
            for draw in itertools.product(range(V), repeat=len(mset)):
                pd = pz * math.prod(law[v] for law, v in zip(laws, draw))
                if pd == 0:
                    continue
                x0 = list(z)
                for j, v in zip(mset, draw):
                    x0[j] = v
                back = rows if planner == "z" else [loo_row(den, tuple(x0), j) for j in range(T)]
                w = [(rows if z[j] == M else back)[j][x0[j]] ** ((1.0 if z[j] == M else eta) / scale)
                     for j in range(T)]
                for kept, pk in kept_set_laws(w, keep).items():
                    new = tuple(x0[j] if j in kept else M for j in range(T))
                    nxt[new] = nxt.get(new, 0.0) + pd * pk
        dist = nxt
    return law_vector(dist, V, T)


def test_plackett_luce_is_gumbel_top_k() -> None:
    """The kept-set law used below equals the top-k of Gumbel-perturbed log-weights (Monte Carlo, 4 sigma)."""
    w = [0.5, 0.2, 0.2, 0.1]
    law = kept_set_laws(w, 2)
    gen = torch.Generator().manual_seed(0)
    g = -torch.log(-torch.log(torch.rand(200000, 4, generator=gen, dtype=torch.float64)))
    top = (torch.tensor(w, dtype=torch.float64).log() + g).topk(2, dim=1).indices.sort(1).values
    for a, pa in law.items():
        hit = (top == torch.tensor(sorted(a))).all(1).double().mean().item()
        assert abs(hit - pa) < 4 * math.sqrt(pa * (1 - pa) / 200000)


@pytest.mark.parametrize("T, S, tau, eta, scale", [
    (4, 4, 1.0, 1.0, 1.0),    # upstream's defaults, one token per step on average
    (4, 2, 1.0, 1.0, 1.0),    # two tokens per step, hence re-masking of the first step's tokens
    (4, 3, 0.7, 0.5, 0.5),    # tempered proposals, damped revealed weights, sharper keys
    (3, 3, 1.0, 2.0, 1.0),    # revealed tokens easier to re-mask
])
def test_law_matches_dynamic_programming(den, T, S, tau, eta, scale) -> None:
    law = p2_law(den, T, S, tau, eta, scale)
    assert abs(float(law.sum()) - 1.0) < 1e-9
    x = P2(den, steps=S, temperature=tau, eta=eta, gumbel_scale=scale).sample(N, T, S, seed=SEED)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_law_in_an_hmm_world(world) -> None:
    """The generic leave-one-out path (the HMM oracle's forward-backward) in a world that is not a first-order chain."""
    s = P2(steps=2).connect(world)
    assert isinstance(s.denoiser, HMMOracleDenoiser)
    law = p2_law(s.denoiser, 4, 2, 1.0, 1.0, 1.0)
    x = s.sample(N, 4, 2, seed=SEED)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_power_the_law_is_not_the_chain_law(den) -> None:
    """The test sees P2's departure from the chain's law and from a neighbouring setting's law at N and ALPHA."""
    law = p2_law(den, 4, 2, 1.0, 1.0, 1.0)
    assert float((law - chain_law(den.chain, 4)).abs().sum()) > 0.01
    x = P2(den, steps=2).sample(N, 4, 2, seed=SEED)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, 4)) < ALPHA
    other = p2_law(den, 4, 2, 1.0, 1.0, 2.0)  # Gumbel scale 2: an L1 distance of 0.08 from P2's law
    assert chi_square_pvalue(sequence_counts(x, V), other) < ALPHA


def test_nfe_and_determinism(den) -> None:
    s = P2(den, steps=8)
    x, nfe = s.generate_with_nfe(torch.arange(12), 32, 8, 3)
    assert x.min() >= 0 and x.max() < V and (nfe == 8).all()  # chunking: test_sampler_contract (config:p2)
    x0 = P2(den, steps=8, gumbel_scale=0.0, temperature=0.0).generate(torch.arange(3), 16, 8, 1)
    assert x0.min() >= 0 and torch.equal(x0[0], x0[1])  # deterministic keys and proposals: one sequence
