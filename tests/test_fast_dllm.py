"""Fast-dLLM threshold / factor decoding: exact law (DP), reduction to LLaDA, adaptive NFE, settings."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import FastDLLM, LLaDA
from dllm_lit.exact import ranked_choice, score_select_law, tempered_options

V, N = 3, 20000
ALPHA = 0.01
GUARD = 1e-6  # no confidence may lie this close to a threshold (float32 oracle vs float64 DP)


def threshold_n(scores: list[float], tau: float) -> int:
    assert all(abs(s - tau) > GUARD for s in scores), "a confidence sits on the threshold"
    return max(1, sum(s >= tau for s in scores))


def factor_n(scores: list[float], f: float) -> int:
    """Upstream's loop, literally (including its exit when only the last rank fails)."""
    srt = sorted(scores, reverse=True)
    th = [1 - f / (r + 1) for r in range(1, len(srt) + 1)]
    th[0] = -1
    assert all(abs(s - t) > GUARD for s, t in zip(srt, th))
    for top_i in range(len(th)):
        if srt[top_i] < th[top_i]:
            break
    if top_i == 0 or top_i == len(th) - 1:
        top_i += 1
    return top_i


def fast_dllm_law(chain, T: int, threshold: float | None, factor: float | None, block_length: int | None,
                  temperature: float, tie_rule: str) -> torch.Tensor:
    bl = block_length or T
    blocks = [(k * bl, (k + 1) * bl) for k in range(T // bl)]

    def select(j, masked, scores):
        n = factor_n(scores, factor) if factor is not None else threshold_n(scores, threshold)
        return ranked_choice(masked, scores, n, tie_rule)

    return score_select_law(chain, T, blocks, lambda g: tempered_options(g, temperature),
                            lambda i, v, g, lo: float(g[i, v]), select)


@pytest.mark.parametrize(
    "T, threshold, factor, block_length, temperature, tie_rule",
    [
        (4, 0.7, None, None, 1.0, "lowest"),
        (4, 0.65, None, 2, 0.5, "random"),
        (4, None, 1.3, None, 1.0, "lowest"),
        (4, None, 0.9, 2, 1.0, "highest"),
        (6, 0.7, None, 3, 1.0, "highest"),
        (6, None, 1.3, None, 1.0, "random"),
    ],
)
def test_law_matches_dynamic_programming(chain, den, T, threshold, factor, block_length, temperature, tie_rule) -> None:
    law = fast_dllm_law(chain, T, threshold, factor, block_length, temperature, tie_rule)
    s = FastDLLM(den, threshold=threshold, factor=factor, block_length=block_length, temperature=temperature,
                 tie_rule=tie_rule)
    x = s.sample(N, T, T, seed=7)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_law_is_not_the_chain(chain, den) -> None:
    """Power: exact chain samples are rejected against a threshold law."""
    law = fast_dllm_law(chain, 4, 0.7, None, None, 1.0, "lowest")
    assert chi_square_pvalue(sequence_counts(chain.sample(N, 4, seed=3), V), law) < ALPHA


@pytest.mark.parametrize("tie_rule", ["lowest", "highest", "random"])
def test_unreachable_threshold_is_llada_one_token_per_step(chain, den, tie_rule) -> None:
    """tau = 1 (no confidence reaches 1 on these chains): one token per step, LLaDA's draws exactly."""
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    for d, T, bl, tau in ((den, 4, None, 1.0), (den, 6, 3, 1.0), (den, 6, 2, 0.0)):
        a = LLaDA(d, temperature=tau, block_length=bl, tie_rule=tie_rule).sample(300, T, T, seed=1)
        f = FastDLLM(d, threshold=1.0, block_length=bl, temperature=tau, tie_rule=tie_rule)
        x, nfe = f.generate_with_nfe(torch.arange(300), T, T, 1)
        assert torch.equal(a, x) and (nfe == T).all()
    eng = OracleDenoiser(english_char_chain())
    for bl in (None, 16):
        a = LLaDA(eng, temperature=1.0, block_length=bl, tie_rule=tie_rule).sample(8, 64, 64, seed=2)
        assert torch.equal(a, FastDLLM(eng, threshold=1.0, block_length=bl, temperature=1.0,
                                       tie_rule=tie_rule).sample(8, 64, 64, seed=2))


def test_adaptive_nfe_counts_steps_per_sequence(den) -> None:
    """Chunking invariance of samples and NFE: tests/test_sampler_contract.py (variant:fast_dllm_blocks,
    fast_dllm_factor_blocks)."""
    for kw in ({"threshold": 0.5}, {"threshold": None, "factor": 2.0}):
        s = FastDLLM(den, block_length=5, temperature=1.0, **kw)
        x, nfe = s.generate_with_nfe(torch.arange(40), 20, 4, 3)
        assert (x != den.mask_id).all()
        assert (nfe >= 4).all() and (nfe <= 20).all() and nfe.unique().numel() > 1  # adaptive


def test_factor_rule_counts() -> None:
    from dllm_lit.samplers.fast_dllm import factor_count, threshold_count

    inf = float("-inf")
    c = torch.tensor([[0.9, 0.8, 0.1, inf], [0.4, 0.3, 0.2, 0.1], [0.9, 0.9, 0.9, 0.1], [0.3, inf, inf, inf]],
                     dtype=torch.float64)
    m = torch.tensor([3, 4, 4, 1])
    # f = 1: thresholds (rank 2, 3, 4) = 2/3, 3/4, 4/5; row 0 fails at rank 3 = the last -> all 3 (upstream)
    assert factor_count(c, m, 1.0).tolist() == [3, 1, 4, 1]
    assert threshold_count(c, 0.85).tolist() == [1, 1, 3, 1]


def test_cache_gives_identical_draws() -> None:
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    oracle = OracleDenoiser(english_char_chain())
    for kw in ({"threshold": 0.3, "temperature": 1.0}, {"threshold": None, "factor": 3.0, "temperature": 0.7,
                                                        "tie_rule": "random"}):
        s = FastDLLM(oracle, block_length=16, **kw)
        cached = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
        s.use_cache = False
        direct = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
        assert torch.equal(cached[0], direct[0]) and torch.equal(cached[1], direct[1])


def test_steps_need_not_divide_into_blocks(den) -> None:
    """Bad options and runs: tests/test_sampler_contract.py (BAD_OPTIONS, BAD_RUNS, test_bad_options, test_steps)."""
    assert (FastDLLM(den, block_length=4).sample(2, 12, 4, seed=0) < V).all()  # steps need not divide into 3 blocks


def test_law_is_exact_when_blocks_outnumber_the_steps(den) -> None:
    """An adaptive rule runs with more blocks than steps (``steps`` only keys its randomness); asking whether its
    law is exact (every run's end-of-batch check) answers False instead of dividing by the steps per block (it
    raised ZeroDivisionError for configs/fast_dllm.yaml at T = 1024, steps 8)."""
    s = FastDLLM(den, block_length=5, temperature=1.0, threshold=0.5)
    assert s.law_is_exact(20, 2) is False
    x, _ = s.generate_with_nfe(torch.arange(4), 20, 2, 0)
    assert (x != den.mask_id).all()
    r = LLaDA(den, remasking="random", temperature=1.0, block_length=5)
    assert r.law_is_exact(20, 20) is True and r.law_is_exact(20, 8) is False
