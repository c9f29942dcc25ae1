"""Exact law of Dream's ``diffusion_generate`` for each ``alg``: origin, maskgit_plus, topk_margin, entropy.

Written from the upstream definition, independently of :mod:`dllm_lit.samplers.dream`: the token law at a
position is p^(1/temperature), then top-p (keeping the token that crosses p), then top-k; ``origin`` reveals
every masked position with probability 1 - t_{j+1}/t_j on t = linspace(1, eps, steps + 1) (float32), the
ranked algs commit the k_j = int(n (1 - t_{j+1}/t_j)) (the rest at the last step) best positions by
confidence, top-2 margin or negative entropy - the top k_j, ties by ``tie_rule``, or with ``alg_temp`` > 0
k_j successive draws without replacement with probabilities proportional to exp(score / alg_temp).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.exact.core import PosteriorCache, law_vector, product_step
from dllm_lit.exact.rules import _prompt_init
from dllm_lit.exact.score_select import plackett_luce_choice, ranked_choice, score_select_law, tempered_options
from dllm_lit.markov import MarkovChain

__all__ = ["DREAM_ALGS", "dream_token_law", "dream_counts", "dream_law", "dream_origin_law"]

DREAM_ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")


def dream_token_law(g: torch.Tensor, temperature: float, top_p: float | None = None,
                    top_k: int | None = None) -> torch.Tensor:
    """Dream's sampling law at one position from its exact marginal g [V] (float64)."""
    V = g.numel()
    q = g.clone() if temperature == 0 else g.clamp_min(0) ** (1 / temperature)
    q = q / q.sum()
    if top_p is not None:
        order = sorted(range(V), key=lambda v: (-float(q[v]), v))
        keep, before = set(), 0.0
        for v in order:
            if abs(before - top_p) <= 1e-6:
                raise ValueError(f"a cumulative mass lies within 1e-6 of top_p {top_p}: ill-posed")
            if before <= top_p:
                keep.add(v)
            before += float(q[v])
        q = torch.tensor([float(q[v]) if v in keep else 0.0 for v in range(V)], dtype=torch.float64)
        q = q / q.sum()
    if top_k is not None:
        kth = sorted(q.tolist(), reverse=True)[top_k - 1]
        q = torch.where(q >= kth, q, torch.zeros_like(q))
        q = q / q.sum()
    return q


def dream_counts(n: int, steps: int, eps: float = 1e-3) -> list[int]:
    """Positions committed per step by the ranked algs: int(n (1 - t_{j+1}/t_j)) of the still-masked n, all at the end."""
    ts = torch.linspace(1, eps, steps + 1)  # float32, as upstream
    out = []
    for i in range(steps):
        k = int(torch.tensor(float(n)) * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else n
        out.append(k)
        n -= k
    return out


def dream_law(chain: MarkovChain, T: int, steps: int, alg: str = "origin", temperature: float = 1.0,
              alg_temp: float = 0.0, top_p: float | None = None, top_k: int | None = None, tie_rule: str = "lowest",
              eps: float = 1e-3, prompt_len: int = 0) -> torch.Tensor:
    """Exact output law of Dream's ``alg`` (module docstring); ``prompt_len`` leading tokens an exact chain prefix."""
    if alg not in DREAM_ALGS:
        raise ValueError(f"alg must be one of {', '.join(DREAM_ALGS)}, got {alg!r}")
    M = chain.mask_id
    init = _prompt_init(chain, T, prompt_len)

    def token(g_row: torch.Tensor) -> torch.Tensor:
        return dream_token_law(g_row, temperature, top_p, top_k)

    def options(q: torch.Tensor) -> list[tuple[int, float]]:  # a draw from q, or its argmax at temperature 0
        return tempered_options(q, 0.0 if temperature == 0 else 1.0)

    if alg == "origin":
        post = PosteriorCache(chain)
        ts = torch.linspace(1, eps, steps + 1).tolist()
        dist = init or {(M,) * T: 1.0}
        for j in range(steps):
            stay = ts[j + 1] / ts[j] if j < steps - 1 else 0.0

            def step_options(z, stay=stay):
                g = post(z)
                return [[(v, 1.0)] if v != M else [(M, stay)] + [(w, q * (1 - stay)) for w, q in options(token(g[i]))]
                        for i, v in enumerate(z)]

            dist = product_step(dist, step_options)
        return law_vector(dist, chain.vocab_size, T)

    def score(i, v, g, lo):
        q = token(g[i])
        if alg == "maskgit_plus":
            return float(q[v])
        if alg == "topk_margin":
            top = sorted(q.tolist(), reverse=True)
            return top[0] - top[1]
        return float((q * torch.log(q + 1e-10)).sum())

    counts = dream_counts(T - prompt_len, steps, eps)

    def select(j, masked, scores):
        if alg_temp:
            return plackett_luce_choice(masked, [math.exp(s / alg_temp) for s in scores], counts[j])
        return ranked_choice(masked, scores, counts[j], tie_rule)

    return score_select_law(chain, T, [(prompt_len, T)], lambda g: options(token(g)), score, select,
                            schedule=[counts], init=init)


def dream_origin_law(chain: MarkovChain, T: int, steps: int, temperature: float = 1.0, eps: float = 1e-3,
                     prompt_len: int = 0) -> torch.Tensor:
    """Dream's ``alg="origin"`` (:func:`dream_law`): every masked position reveals with probability
    1 - t_{j+1}/t_j (1 at the last step) a token drawn from p^(1/temperature)."""
    return dream_law(chain, T, steps, "origin", temperature, eps=eps, prompt_len=prompt_len)
