"""Slowly mixing and nearly periodic chains: the oracle's build is bounded by a spectral estimate known before any
power is computed (an exact fallback in milliseconds instead of a build that filled a 4 GiB budget for hours), and
a nearly reducible chain's stationary law is solved instead of iterated 10^6 times."""
from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser, forward_backward_posterior
from dllm_lit.engine import connect
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.markov.mixing import certification_depth, second_eigenvalue_modulus
from dllm_lit.samplers import FHS
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")
E = 1e-9
SLOW = [[1 - E, E], [E, 1 - E]]  # second eigenvalue 1 - 2e-9
PERIODIC2 = [[E, 1 - E], [1 - E, E]]  # second eigenvalue -1 + 2e-9
PERIODIC3 = [[E, 1 - E, 0.0], [0.0, E, 1 - E], [1 - E, 0.0, E]]  # near the cube roots of unity


def _kernel(rows) -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(rows, dtype=torch.float64))


def _enumerated_posterior(chain: MarkovChain, z: torch.Tensor) -> torch.Tensor:
    """p(x_t = v | z) by summing p0 over all V^T sequences agreeing with z (float64)."""
    V, T = chain.vocab_size, z.shape[0]
    xs = torch.tensor(list(itertools.product(range(V), repeat=T)))
    keep = ((xs == z) | (z == chain.mask_id)).all(1)
    xs = xs[keep]
    w = chain.log_prob(xs).exp()
    out = torch.zeros(T, V, dtype=torch.float64)
    for t in range(T):
        out[t].index_add_(0, xs[:, t], w)
    return out / w.sum()


@pytest.mark.parametrize("rows, gap", [(SLOW, "2e-09"), (PERIODIC2, "2e-09"), (PERIODIC3, "1.5e-09")])
def test_slow_kernels_build_in_milliseconds_with_an_exact_fallback(rows, gap) -> None:
    chain = _kernel(rows)
    started = time.process_time()
    with pytest.warns(UserWarning, match="mixes too slowly") as caught:
        oracle = OracleDenoiser(chain, dtype=torch.float64)
    assert time.process_time() - started < 2.0
    message = str(caught[0].message)
    assert len(caught) == 1 and "\n" not in message and f"second eigenvalue modulus is 1 - {gap}," in message
    assert not oracle.certified and oracle.depth == 64
    # brute force: every V^T sequence enumerated (distances inside the table)
    x = chain.sample(1, 9, seed=3)[0]
    z = torch.full_like(x, chain.mask_id)
    z[[0, 5]] = x[[0, 5]]
    got = oracle(z[None])[0].exp()
    assert (got - _enumerated_posterior(chain, z)).abs().max().item() <= 1e-12
    # distances beyond the table, multiplied out: the float64 forward-backward (itself tested by enumeration)
    x = chain.sample(3, 200, seed=4)
    z = torch.full_like(x, chain.mask_id)
    z[0, 0], z[0, 190], z[1, 100], z[2, 199] = x[0, 0], x[0, 190], x[1, 100], x[2, 199]
    assert (oracle(z).exp() - forward_backward_posterior(chain, z)).abs().max().item() <= 1e-12


def test_a_slow_chain_samples_through_the_run_wiring(tmp_path) -> None:
    """A paper artifact holding the slow kernel, wired as `predict` wires it: built in seconds, sampled exactly
    by the first-hitting sampler, exact (a switch has probability 1e-9 per step: every sequence is constant)."""
    from dllm_lit.data import MarkovDataModule
    from dllm_lit.sources import PaperArtifact

    V = 2
    torch.save({"nbr_idx": torch.arange(V).expand(V, V).clone(), "nbr_prob": torch.tensor(SLOW),
                "nu": torch.full((V,), 0.5), "eps": 0.0, "pi": torch.full((V,), 0.5)}, tmp_path / "gt.pt")
    dm = MarkovDataModule(source=PaperArtifact(str(tmp_path / "gt.pt")), num_sequences=8, seq_len=300, seed=0)
    sampler = FHS()
    started = time.process_time()
    with pytest.warns(UserWarning, match="mixes too slowly"):
        connect(sampler, dm, reference=False)
    x = sampler.sample(8, 300, seed=0)
    assert time.process_time() - started < 10.0
    assert (x == x[:, :1]).all()


def test_the_spectral_bound_holds_and_leaves_mixing_chains_alone() -> None:
    """log(mixing_tol) / log(lam_*) <= the certified depth (a lower bound against the truth), dense and ARPACK
    estimates agree, and chains that mix keep their certified tables."""
    english = english_char_chain()
    oracle = OracleDenoiser(english)
    lam = second_eigenvalue_modulus(english)
    assert oracle.certified and certification_depth(lam, 1e-8) <= oracle.depth == 22
    chain = synthetic_chain(300, 20, eps=1e-3, seed=2)  # V > 256: ARPACK on the deflated operator
    dense = np.abs(np.linalg.eigvals(chain.kernel.numpy()))
    assert abs(second_eigenvalue_modulus(chain) - np.sort(dense)[-2]) <= 1e-8
    mixing = synthetic_chain(64, 8, eps=1e-3, seed=0)
    oracle = OracleDenoiser(mixing)
    assert oracle.certified and certification_depth(second_eigenvalue_modulus(mixing), 1e-8) <= oracle.depth


def test_a_nearly_reducible_chain_has_its_stationary_law_solved() -> None:
    chain = _kernel([[1 - E, E], [3 * E, 1 - 3 * E]])  # pi = (3/4, 1/4); the lazy iteration needs ~1e10 steps
    started = time.process_time()
    pi = chain.stationary
    assert time.process_time() - started < 1.0
    assert (pi - torch.tensor([0.75, 0.25], dtype=torch.float64)).abs().max().item() <= 1e-7
    assert (chain.apply_right(pi[None])[0] - pi).abs().sum().item() <= chain.stationary_tol
    assert math.isclose(pi.sum().item(), 1.0, abs_tol=1e-15)
