"""Dream's alg family: exact law (DP), ordered-decoding and cache fast paths, schedule, settings."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import GenericDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.samplers import Dream
from exact_laws import (PosteriorCache, law_vector, plackett_luce_choice, product_step, ranked_choice,
                        score_select_law, tempered_options)

V, N = 3, 20000
ALPHA = 0.01
EPS = 1e-3


def q_law(g: torch.Tensor, temperature: float, top_p: float | None, top_k: int | None) -> torch.Tensor:
    """Dream's sample_tokens law at one position, written out: tempered, top-p keeping the crossing token, top-k."""
    q = g.clone() if temperature == 0 else g.clamp_min(0) ** (1 / temperature)
    q = q / q.sum()
    if top_p is not None:
        order = sorted(range(V), key=lambda v: (-float(q[v]), v))
        keep, before = set(), 0.0
        for v in order:
            assert abs(before - top_p) > 1e-6, "a cumulative mass sits on top_p (float32 oracle vs float64 DP)"
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


def schedule(n: int, steps: int) -> list[int]:
    ts = torch.linspace(1, EPS, steps + 1)  # float32, as upstream
    out = []
    for i in range(steps):
        k = int(torch.tensor(float(n)) * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else n
        out.append(k)
        n -= k
    return out


def dream_law(chain, T: int, steps: int, alg: str, temperature: float, alg_temp: float = 0.0,
              top_p: float | None = None, top_k: int | None = None, tie_rule: str = "lowest") -> torch.Tensor:
    M = chain.mask_id

    def q_of(g_row):
        return q_law(g_row, temperature, top_p, top_k)

    def options(q):  # the proposal: a draw from q (tau > 0) or its argmax
        return tempered_options(q, 0.0 if temperature == 0 else 1.0)

    if alg == "origin":
        post = PosteriorCache(chain)
        ts = torch.linspace(1, EPS, steps + 1).tolist()
        dist = {(M,) * T: 1.0}
        for j in range(steps):
            stay = ts[j + 1] / ts[j] if j < steps - 1 else 0.0

            def opts(z):
                g = post(z)
                return [[(v, 1.0)] if v != M else
                        [(M, stay)] + [(w, q * (1 - stay)) for w, q in options(q_of(g[i]))] for i, v in enumerate(z)]

            dist = product_step(dist, opts)
        return law_vector(dist, V, T)

    def score(i, v, g, lo):
        q = q_of(g[i])
        if alg == "maskgit_plus":
            return float(q[v])
        if alg == "topk_margin":
            top = sorted(q.tolist(), reverse=True)
            return top[0] - top[1]
        return float((q * torch.log(q + 1e-10)).sum())

    counts = schedule(T, steps)

    def select(j, masked, scores):
        n = counts[j]
        if alg_temp:
            return plackett_luce_choice(masked, [math.exp(s / alg_temp) for s in scores], n)
        return ranked_choice(masked, scores, n, tie_rule)

    return score_select_law(chain, T, [(0, T)], lambda g: options(q_of(g)), score, select, schedule=[counts])


@pytest.mark.parametrize(
    "T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule",
    [
        (4, 3, "origin", 1.0, 0.0, None, None, "lowest"),
        (4, 2, "origin", 0.8, 0.0, 0.7, None, "lowest"),
        (4, 2, "maskgit_plus", 1.0, 0.0, None, None, "lowest"),
        (4, 3, "topk_margin", 1.0, 0.0, None, None, "random"),
        (4, 2, "entropy", 0.5, 0.0, None, 2, "highest"),
        (4, 2, "maskgit_plus", 1.0, 0.5, None, None, "lowest"),
        (4, 3, "entropy", 1.0, 1.0, 0.85, None, "lowest"),
        (6, 3, "entropy", 1.0, 0.0, None, None, "lowest"),
        pytest.param(6, 3, "origin", 1.0, 0.0, None, None, "lowest", marks=pytest.mark.slow),  # DP ~20 s
    ],
)
def test_law_matches_dynamic_programming(chain, den, T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule) -> None:
    law = dream_law(chain, T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule)
    s = Dream(den, alg=alg, temperature=temperature, alg_temp=alg_temp, top_p=top_p, top_k=top_k, tie_rule=tie_rule)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_alg_temp_changes_the_law(chain, den) -> None:
    """Power: samples with positions sampled (alg_temp = 0.5) are rejected against the top-n law."""
    law = dream_law(chain, 4, 2, "maskgit_plus", 1.0)
    x = Dream(den, alg="maskgit_plus", temperature=1.0, alg_temp=0.5).sample(N, 4, 2, seed=5)
    assert chi_square_pvalue(sequence_counts(x, V), law) < ALPHA


def test_schedule_floor_and_last_step() -> None:
    from dllm_lit.samplers.dream import dream_schedule

    for n, steps in ((4, 2), (64, 7), (1024, 512), (5, 9)):
        k = dream_schedule(n, steps, EPS)
        assert sum(k) == n and len(k) == steps and k == schedule(n, steps)
    assert dream_schedule(4, 2, EPS) == [1, 3]  # int(4 * (1 - 0.5005)) = 1, the rest at the last step


def test_origin_ordered_fast_path_equals_generic_path(den) -> None:
    for kw in ({"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.8}, {"temperature": 0.0}):
        fast = Dream(den, alg="origin", **kw).sample(50, 40, 9, seed=4)
        slow = Dream(GenericDenoiser(den), alg="origin", **kw).sample(50, 40, 9, seed=4)
        assert torch.equal(fast, slow)


def test_cache_gives_identical_draws() -> None:
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    oracle = OracleDenoiser(english_char_chain())
    for kw in ({"alg": "maskgit_plus", "temperature": 1.0}, {"alg": "topk_margin", "temperature": 0.5, "top_k": 5},
               {"alg": "entropy", "temperature": 1.0, "alg_temp": 0.2, "top_p": 0.85},
               {"alg": "maskgit_plus", "temperature": 0.0, "tie_rule": "random"}):
        s = Dream(oracle, **kw)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), kw


def test_no_mask_left_and_batch_invariance(den) -> None:
    for alg in ("origin", "maskgit_plus", "entropy"):
        s = Dream(den, alg=alg, temperature=1.0, alg_temp=0.3 if alg == "entropy" else None)
        full = s.sample(12, 30, steps=6, seed=5)
        assert full.min() >= 0 and full.max() < V
        assert torch.equal(full[7:], s.sample(5, 30, steps=6, seed=5, start_index=7))


def test_bad_settings(den) -> None:
    for kw, field in (({"alg": "confidence"}, "alg"), ({"alg_temp": -0.1}, "alg_temp"),
                      ({"temperature": -1}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.2}, "top_p"),
                      ({"top_k": 0}, "top_k"), ({"eps": 0.0}, "eps"), ({"eps": 1.0}, "eps"),
                      ({"tie_rule": "left"}, "tie_rule"), ({"steps": [4, 4]}, "steps")):
        with pytest.raises(ValueError, match=field):
            Dream(den, **kw)
