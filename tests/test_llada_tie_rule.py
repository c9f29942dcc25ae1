"""LLaDA's tie_rule: each rule's exact law (DP with the same selection), and the rule moves the law."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import LLaDA
from dllm_lit.exact import ranked_choice, score_select_law, tempered_options
from test_llada import llada_law

V, N = 3, 20000
ALPHA = 0.01


def llada_tie_law(chain, T: int, steps: int, temperature: float, tie_rule: str, block_length: int | None = None):
    bl = block_length or T
    nb = T // bl
    S = steps // nb
    counts = [bl // S + (1 if i < bl % S else 0) for i in range(S)]
    return score_select_law(chain, T, [(k * bl, (k + 1) * bl) for k in range(nb)],
                            lambda g: tempered_options(g, temperature), lambda i, v, g, lo: float(g[i, v]),
                            lambda j, masked, scores: ranked_choice(masked, scores, counts[j % S], tie_rule),
                            schedule=[counts] * nb)


def test_generic_dp_reproduces_the_llada_dp(chain) -> None:
    for steps, tau, bl in ((2, 1.0, None), (4, 2.0, 2), (3, 0.5, None)):
        assert torch.allclose(llada_tie_law(chain, 4, steps, tau, "lowest", bl), llada_law(chain, 4, steps, "low_confidence", tau, bl),
                              atol=1e-12)


@pytest.mark.parametrize("T, steps, temperature, tie_rule, block_length", [
    (4, 2, 1.0, "highest", None), (4, 2, 1.0, "random", None), (4, 4, 0.5, "random", 2), (6, 3, 1.0, "random", None)])
def test_law_matches_dynamic_programming(chain, den, T, steps, temperature, tie_rule, block_length) -> None:
    law = llada_tie_law(chain, T, steps, temperature, tie_rule, block_length)
    x = LLaDA(den, temperature=temperature, tie_rule=tie_rule, block_length=block_length).sample(N, T, steps, seed=9)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_tie_rule_moves_the_law(chain) -> None:
    """Under the exact oracle the first step ties every position (posterior pi): the rule decides where decoding starts."""
    laws = {r: llada_tie_law(chain, 4, 2, 1.0, r) for r in ("lowest", "highest", "random")}
    for a, b in (("lowest", "highest"), ("lowest", "random"), ("highest", "random")):
        assert 0.5 * (laws[a] - laws[b]).abs().sum() > 0.02, (a, b)


def test_names(den) -> None:
    """A bad tie_rule: tests/test_sampler_contract.py (BAD_OPTIONS, test_bad_options)."""
    assert LLaDA(den).name == "llada" and LLaDA(den, tie_rule="random").name == "llada_tie_random"


def test_random_ties_cached(den) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (variant:llada_tie_random_blocks)."""
    s = LLaDA(den, temperature=1.0, tie_rule="random", block_length=10)
    full = s.sample(12, 30, 6, seed=5)
    s.use_cache = False
    assert torch.equal(full, s.sample(12, 30, 6, seed=5))
