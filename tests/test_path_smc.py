"""The path law (dllm_lit.samplers.path_law) and the SMC sandwich over reveal states (dllm_lit.samplers.path_smc).

Fast checks on a V = 3 chain with the float64 oracle: the path law's step probabilities, summed over every path,
give the exact law of the dynamic program (dllm_lit.exact.mdlm_paper_law, 1e-12); the SMC's estimate is exact in
expectation (K = 1: the proposal's density enumerated; K = 4: a Monte Carlo mean over 4000 runs within 4 standard
errors); the two ends bracket log q(x) on average; keyed randomness makes the estimates batch-independent.
Coverage of the bracket's confidence bounds over seeds: ``tests/test_path_smc_coverage.py`` (slow).
"""
from __future__ import annotations

import itertools

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import mdlm_paper_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.draws import drawn_log_prob
from dllm_lit.samplers.path_law import PathLaw, RandomSubsetLaw

KERNEL3 = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def _world(T: int, counts: list[int]):
    chain = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    den = OracleDenoiser(chain, dtype=torch.float64)
    law = RandomSubsetLaw(den, counts, [(0, T)] * len(counts), lambda j, b, p, probs, tok: drawn_log_prob(probs, tok))
    return chain, den, law


def _paths(T: int, counts: list[int]):
    """Every ordered partition of range(T) into sets of the given sizes."""
    def rec(rest: frozenset, j: int):
        if j == len(counts):
            yield []
            return
        for S in itertools.combinations(sorted(rest), counts[j]):
            for tail in rec(rest - set(S), j + 1):
                yield [S, *tail]
    return list(rec(frozenset(range(T)), 0))


@pytest.mark.parametrize("counts", [[1, 2, 1], [2, 2], [4]])
def test_step_probabilities_sum_over_paths_to_the_exact_law(counts) -> None:
    T = sum(counts)
    chain, den, law = _world(T, counts)
    assert isinstance(law, PathLaw)
    xs = torch.tensor(list(itertools.product(range(3), repeat=T)))
    total = torch.zeros(len(xs), dtype=torch.float64)
    for path in _paths(T, counts):
        z = torch.full_like(xs, den.mask_id)
        lp = torch.zeros(len(xs), dtype=torch.float64)
        for j, S in enumerate(path):
            commit = torch.zeros_like(xs, dtype=torch.bool)
            commit[:, list(S)] = True
            lp += law.step_log_prob(z, commit, xs, j)
            z = torch.where(commit, xs, z)
        total += lp.exp()
    assert torch.allclose(total, mdlm_paper_law(chain, T, len(counts), counts), rtol=0, atol=1e-12)


def test_step_log_prob_is_minus_inf_off_the_law() -> None:
    _, den, law = _world(4, [2, 2])
    x = torch.tensor([[0, 1, 2, 0]])
    z = torch.full_like(x, den.mask_id)
    one = torch.tensor([[True, False, False, False]])  # one commit where the schedule fixes two
    assert law.step_log_prob(z, one, x, 0).item() == float("-inf")
    z2 = torch.tensor([[0, den.mask_id, den.mask_id, den.mask_id]])
    again = torch.tensor([[True, True, False, False]])  # position 0 is already revealed
    assert law.step_log_prob(z2, again, x, 1).item() == float("-inf")
