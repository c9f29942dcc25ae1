"""LLaDA's low-confidence path law (dllm_lit/samplers/llada_path_law.py): its step probabilities sum over every
path to the exact output law, and the SMC sandwich over it brackets log q(x) and is wired as sandwich_method smc."""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import llada_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.llada_path_law import LLaDAPathLaw
from dllm_lit.samplers.path_law import PathLaw
from dllm_lit.samplers.selection import rank_positions

KERNEL3 = [[0.55, 0.3, 0.15], [0.21, 0.12, 0.67], [0.48, 0.27, 0.25]]
#: a kernel whose oracle rows break a mathematical tie by rounding: at (M, 0, 0, 0, M) p_0(1) and p_4(2) are both 0.1
#: but read 0.09999999999999998 and 0.09999999999999999, which the sampler ranks as unequal
KERNEL_ROUNDED_TIE = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def _sampler(kernel=KERNEL3, **kw) -> tuple[MarkovChain, LLaDA]:
    chain = MarkovChain.from_kernel(torch.tensor(kernel, dtype=torch.float64))
    s = LLaDA(OracleDenoiser(chain, dtype=torch.float64), **kw)
    s.connect(chain)
    return chain, s


def _path_sum(law: LLaDAPathLaw, T: int, mask_id: int) -> torch.Tensor:
    """sum over every path (a k_j-subset of the window's masked positions per step) of prod_j exp(step_log_prob),
    for every x in {0, 1, 2}^T (lexicographic)."""
    xs = torch.tensor(list(itertools.product(range(3), repeat=T)))
    total = torch.zeros(len(xs), dtype=torch.float64)

    def rec(z: torch.Tensor, masked: frozenset, j: int, lp: torch.Tensor) -> None:
        nonlocal total
        if j == law.num_steps:
            total += lp.exp()
            return
        lo, hi = law.windows[j]
        for S in itertools.combinations(sorted(i for i in masked if lo <= i < hi), law.counts[j]):
            commit = torch.zeros_like(xs, dtype=torch.bool)
            commit[:, list(S)] = True
            rec(torch.where(commit, xs, z), masked - set(S), j + 1, lp + law.step_log_prob(z, commit, xs, j))

    rec(torch.full_like(xs, mask_id), frozenset(range(T)), 0, torch.zeros(len(xs), dtype=torch.float64))
    return total


@pytest.mark.parametrize("T, steps, block_length, temperature, tie_rule", [
    (5, 3, None, 1.0, "lowest"), (5, 3, None, 1.0, "highest"), (4, 4, 2, 0.7, "lowest"), (4, 2, None, 1.5, "highest"),
    (4, 6, 2, 1.0, "lowest"),  # 3 steps per block of 2: a step commits nothing
])
def test_path_probabilities_sum_to_the_exact_law(T, steps, block_length, temperature, tie_rule) -> None:
    """sum over paths of exp(sum_j step_log_prob) = LLaDA's exact output law (DP over states, every joint proposal
    enumerated), float64, to 1e-12; the all-masked state's rows tie at every position, so the tie rule is exercised."""
    chain, s = _sampler(steps=steps, temperature=temperature, tie_rule=tie_rule, block_length=block_length)
    law = LLaDAPathLaw(s, T, steps)
    assert isinstance(law, PathLaw)
    exact = llada_law(chain, T, steps, temperature=temperature, tie_rule=tie_rule, block_length=block_length)
    assert torch.allclose(_path_sum(law, T, chain.mask_id), exact, rtol=0, atol=1e-12)


def _sampler_law(s: LLaDA, law: LLaDAPathLaw, T: int) -> torch.Tensor:
    """The sampler's output law by brute force: every joint proposal of each step from the denoiser's own rows,
    ranked by the engine's :func:`rank_positions` (its float comparisons and tie rule), k_j best committed."""
    M, den, dist = s.mask_id, s.denoiser, {(s.mask_id,) * T: 1.0}
    for j, k in enumerate(law.counts):
        lo, hi = law.windows[j]
        new: dict = defaultdict(float)
        for z, pz in dist.items():
            m = [i for i in range(lo, hi) if z[i] == M]
            rows = den.probs_at(torch.tensor([z]), torch.zeros(len(m), dtype=torch.long), torch.tensor(m))
            for combo in itertools.product(range(3), repeat=len(m)):
                score = torch.full((1, T), -torch.inf, dtype=torch.float64)
                score[0, m] = rows[torch.arange(len(m)), torch.tensor(combo)]
                zz = list(z)
                for i in rank_positions(score, s.tie_rule)[0, :k].tolist():
                    zz[i] = combo[m.index(i)]
                new[tuple(zz)] += pz * float(score[0, m].prod())  # temperature 1: r = p
        dist = new
    out = torch.zeros(3 ** T, dtype=torch.float64)
    for z, p in dist.items():
        out[sum(v * 3 ** (T - 1 - i) for i, v in enumerate(z))] += p
    return out


@pytest.mark.parametrize("tie_rule", ["lowest", "highest"])
def test_path_law_follows_the_samplers_float_ranking(tie_rule) -> None:
    """Where the oracle's rows break a mathematical tie by rounding (KERNEL_ROUNDED_TIE), the path law is the
    sampler's (brute force over joint proposals with the engine's ranking, 1e-12), not the 9-decimal exact DP's."""
    chain, s = _sampler(KERNEL_ROUNDED_TIE, steps=3, temperature=1.0, tie_rule=tie_rule)
    law = LLaDAPathLaw(s, 5, 3)
    assert torch.allclose(_path_sum(law, 5, chain.mask_id), _sampler_law(s, law, 5), rtol=0, atol=1e-12)


def test_the_tie_rule_moves_the_law() -> None:
    """From the all-masked state (every row pi, tied across positions) committing {0, 1} with token 0 = argmax pi:
    under "lowest" the others lose every tie, so log q = 2 log pi(0); under "highest" they win ties with token 0,
    so log q = 2 log pi(0) + 3 log(1 - pi(0)) (1e-12)."""
    laws = [LLaDAPathLaw(_sampler(steps=3, temperature=1.0, tie_rule=r)[1], 5, 3) for r in ("lowest", "highest")]
    x, z = torch.zeros((1, 5), dtype=torch.long), torch.full((1, 5), 3)
    commit = torch.tensor([[True, True, False, False, False]])
    pi0 = float(laws[0].denoiser.probs_at(z, torch.tensor([0]), torch.tensor([0]))[0, 0])
    a, b = (float(law.step_log_prob(z, commit, x, 0)) for law in laws)
    assert abs(a - 2 * math.log(pi0)) < 1e-12 and abs(b - 2 * math.log(pi0) - 3 * math.log(1 - pi0)) < 1e-12


@pytest.mark.parametrize("kw, field", [({"temperature": 0.0}, "temperature"), ({"tie_rule": "random"}, "tie_rule"),
                                       ({"remasking": "random"}, "random remasking")])
def test_unscorable_configurations_are_refused_in_one_line(kw, field) -> None:
    _, s = _sampler(steps=2, **{"temperature": 1.0, **kw})
    s.sandwich_paths, s.sandwich_method = 2, "smc"
    with pytest.raises(ValueError, match=field) as err:
        LLaDAPathLaw(s, 4, 2)
    assert "\n" not in str(err.value)
    if kw.get("remasking") != "random":
        with pytest.raises(ValueError, match="sandwich_method 'smc'"):
            s.generate_with_stats(torch.arange(2), 4, 2, 0)


@pytest.mark.parametrize("prompt_mode", [None, "pi"])
def test_sandwich_brackets_log_q_and_leaves_the_samples_unchanged(prompt_mode) -> None:
    """V = 3, T = 5, 3 steps, 300 samples at temperature 1, K = 1 and 8: the lower end's Z_K / q(x) has mean 1
    (unbiased; within 4 standard errors; a proposed path of probability 0 reads Z = 0, log -inf), the upper end's
    mean log Z_K - log q(x) is above 0 (3 standard errors) and falls by half from K = 1 to 8, and the samples are
    those of the run without the sandwich; with ``prompt_mode`` "pi" the drawn first token's log q is in both ends
    (the exact law: a chain prefix of length 1, then LLaDA on the rest)."""
    chain, s = _sampler(steps=3, temperature=1.0, prompt_mode=prompt_mode)
    idx, T = torch.arange(300), 5
    x0, _ = s.generate_with_stats(idx, T, 3, 0)
    law = llada_law(chain, T, 3, temperature=1.0, prompt_len=int(prompt_mode is not None))
    log_q = law[(x0 * 3 ** torch.arange(T - 1, -1, -1)).sum(1)].log()
    s.sandwich_method, ups = "smc", []
    for K in (1, 8):
        s.sandwich_paths = K
        x, st = s.generate_with_stats(idx, T, 3, 0)
        assert torch.equal(x, x0)
        ratio, hi = (st["log_q_iw_lower"] - log_q).exp(), st["log_q_iw_upper"] - log_q
        assert abs(float(ratio.mean()) - 1) < 4 * float(ratio.std()) / 300 ** 0.5
        assert float(hi.mean()) > -3 * float(hi.std()) / 300 ** 0.5
        ups.append(float(hi.mean()))
    assert ups[1] < ups[0] / 2

