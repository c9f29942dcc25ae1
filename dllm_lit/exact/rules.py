"""Named exact laws for conformance: LLaDA (each tie rule, random remasking), Fast-dLLM threshold, EB, PC-sampler.

Each is the law of the rule as its upstream code defines it, by dynamic programming over partially masked states
(:func:`~dllm_lit.exact.score_select.score_select_law`); docs/samplers/ describes the rules.
"""
from __future__ import annotations

import math

import torch

from dllm_lit.exact.confidence import transfer_counts
from dllm_lit.exact.core import State
from dllm_lit.exact.score_select import ranked_choice, score_select_law, tempered_options
from dllm_lit.markov import MarkovChain

__all__ = ["llada_law", "fast_dllm_law", "eb_law", "pc_law", "THRESHOLD_GUARD"]

#: a confidence (or an entropy sum) this close to its threshold makes the float32 sampler and the float64 DP
#: disagree on a hard decision: the law is then refused as ill-posed
THRESHOLD_GUARD = 1e-6


def _blocks(T: int, prompt_len: int, block_length: int | None) -> list[tuple[int, int]]:
    G = T - prompt_len
    bl = block_length or G
    if G <= 0 or G % bl:
        raise ValueError(f"block_length {bl} must divide the generated length {G} (T {T} - prompt {prompt_len})")
    return [(prompt_len + k * bl, prompt_len + (k + 1) * bl) for k in range(G // bl)]


def _prompt_init(chain: MarkovChain, T: int, prompt_len: int) -> dict[State, float] | None:
    """The first ``prompt_len`` tokens an exact chain prefix (None without a prompt)."""
    if prompt_len == 0:
        return None
    from dllm_lit.exact.core import chain_law

    law = chain_law(chain, prompt_len)
    V, M = chain.vocab_size, chain.mask_id
    out = {}
    for code, p in enumerate(law.tolist()):
        toks = []
        for _ in range(prompt_len):
            code, r = divmod(code, V)
            toks.append(r)
        if p > 0:
            out[tuple(reversed(toks)) + (M,) * (T - prompt_len)] = p
    return out


def llada_law(chain: MarkovChain, T: int, steps: int, temperature: float = 1.0, remasking: str = "low_confidence",
              tie_rule: str = "lowest", block_length: int | None = None, prompt_len: int = 0) -> torch.Tensor:
    """LLaDA's ``generate()``: blocks left to right, ``steps / blocks`` steps each committing the even split of the
    block; proposals from p^(1/temperature); the k most confident (ties by ``tie_rule``) or k uniformly random
    positions commit.  ``prompt_len`` leading tokens are an exact chain prefix."""
    blocks = _blocks(T, prompt_len, block_length)
    if steps % len(blocks):
        raise ValueError(f"steps {steps} must be a multiple of the number of blocks {len(blocks)}")
    S = steps // len(blocks)
    counts = transfer_counts(blocks[0][1] - blocks[0][0], S)
    rule = "random" if remasking == "random" else tie_rule

    def score(i, v, g, lo):
        return 0.0 if remasking == "random" else float(g[i, v])

    return score_select_law(chain, T, blocks, lambda g: tempered_options(g, temperature), score,
                            lambda j, masked, scores: ranked_choice(masked, scores, counts[j % S], rule),
                            schedule=[counts] * len(blocks), init=_prompt_init(chain, T, prompt_len))


def fast_dllm_law(chain: MarkovChain, T: int, threshold: float = 0.9, temperature: float = 1.0,
                  block_length: int | None = None, tie_rule: str = "lowest") -> torch.Tensor:
    """Fast-dLLM's threshold rule: per step, every masked position of the block whose confidence reaches
    ``threshold`` commits (at least the most confident one), until the block is full."""
    def select(j, masked, scores):
        if any(abs(s - threshold) <= THRESHOLD_GUARD for s in scores):
            raise ValueError(f"a confidence lies within {THRESHOLD_GUARD} of threshold {threshold}: ill-posed")
        return ranked_choice(masked, scores, max(1, sum(s >= threshold for s in scores)), tie_rule)

    return score_select_law(chain, T, _blocks(T, 0, block_length), lambda g: tempered_options(g, temperature),
                            lambda i, v, g, lo: float(g[i, v]), select)


def eb_law(chain: MarkovChain, T: int, gamma: float = 0.01, temperature: float = 1.0,
           tie_rule: str = "lowest") -> torch.Tensor:
    """EB-sampler: per step the lowest-entropy positions whose sorted entropy prefix, minus its largest term,
    stays within ``gamma`` (at least one)."""
    def select(j, masked, scores):  # scores = -H
        H = sorted(-s for s in scores)
        acc, n = 0.0, 0
        for h in H:
            acc += h
            if abs(acc - h - gamma) <= THRESHOLD_GUARD:
                raise ValueError(f"an entropy sum lies within {THRESHOLD_GUARD} of gamma {gamma}: ill-posed")
            n += acc - h <= gamma
        return ranked_choice(masked, scores, max(1, n), tie_rule)

    return score_select_law(chain, T, [(0, T)], lambda g: tempered_options(g, temperature),
                            lambda i, v, g, lo: -float(-torch.special.xlogy(g[i], g[i]).sum()), select)



def pc_law(chain: MarkovChain, T: int, steps: int, lambd: float = 0.25, alpha: float = 10.0,
           block_length: int | None = None, temperature: float = 1.0, tie_rule: str = "lowest") -> torch.Tensor:
    """PC-sampler: LLaDA's block schedule, positions ranked by the calibrated, position-weighted score
    exp(-lambd (i - block start)) min(alpha, -p(v) log pi(v)) (pi the chain's stationary law)."""
    blocks = _blocks(T, 0, block_length)
    if steps % len(blocks):
        raise ValueError(f"steps {steps} must be a multiple of the number of blocks {len(blocks)}")
    S = steps // len(blocks)
    counts = transfer_counts(blocks[0][1] - blocks[0][0], S)
    pi = chain.stationary.double()

    def score(i, v, g, lo):
        return math.exp(-lambd * (i - lo)) * min(alpha, -float(g[i, v]) * math.log(float(pi[v]) + 1e-9))

    return score_select_law(chain, T, blocks, lambda g: tempered_options(g, temperature), score,
                            lambda j, masked, scores: ranked_choice(masked, scores, counts[j % S], tie_rule),
                            schedule=[counts] * len(blocks))
