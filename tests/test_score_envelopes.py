"""Reference-row score bounds (:mod:`dllm_lit.decoding.score_envelopes`): they hold at every neighbourhood, are far
tighter than log max q where a side is flat (here by > 0.5 nats; bound within 1e-3), and Dream's bounded ranking with them draws what the dense ranking draws
(exact ties included: a uniform kernel makes every row the same numbers)."""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import Dream
from dllm_lit.decoding import neighbourhood_rows
from dllm_lit.samplers.dream import NEGENT_BOUND_SLACK, dream_law
from dllm_lit.decoding.score_envelopes import ReferenceScoreBounds
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


def _chains() -> dict[str, MarkovChain]:
    return {"uniform": MarkovChain.from_kernel(torch.full((5, 5), 0.2, dtype=torch.float64)),
            "tiny": MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64)),
            "sparse": synthetic_chain(300, 12, eps=0.01, seed=3), "english": english_char_chain()}


def _scores(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """Dream's two feature scores of posterior rows, as the sampler computes them (tau = 1, no filters)."""
    q = dream_law(rows, 1.0, None, None)
    top = torch.topk(q, min(2, q.shape[1]), dim=-1).values
    return {"entropy": (q * torch.log(q + 1e-10)).sum(-1), "topk_margin": top[:, 0] - top[:, 1]}


@pytest.mark.parametrize("name", ["uniform", "tiny", "sparse", "english"])
def test_bounds_hold_at_every_neighbourhood(name) -> None:
    """Every computed score <= its envelope bound (distances 0 .. 3 D: none, near and beyond the depth)."""
    den = OracleDenoiser(_chains()[name])
    V, D = den.vocab_size, den.depth
    g = torch.Generator().manual_seed(1)
    n = 3000
    xl, xr = torch.randint(0, V, (n,), generator=g), torch.randint(0, V, (n,), generator=g)
    d1, d2 = torch.randint(0, 3 * D + 2, (n,), generator=g), torch.randint(0, 3 * D + 2, (n,), generator=g)
    scores = _scores(den.probs_given_neighbours(xl, d1, xr, d2))
    for alg in ("entropy", "topk_margin"):
        env = ReferenceScoreBounds(den, alg, NEGENT_BOUND_SLACK)
        bound = env(xl, d1, xr, d2)
        covered = torch.isfinite(bound)
        assert bool(covered.any())
        # positions with both neighbours within the depth have no envelope
        near = (d1 > 0) & (d1 < D) & (d2 > 0) & (d2 < D)
        assert not bool((covered & near).any())
        assert bool((scores[alg][covered] <= bound[covered]).all()), alg


def test_bounds_are_tight_where_a_side_is_flat() -> None:
    """Beyond the depth on both sides the row is about pi: the entropy bound is within 1e-3 of -H(pi), where
    log max q is not."""
    den = OracleDenoiser(_chains()["sparse"])
    D, V = den.depth, den.vocab_size
    x = torch.arange(V)
    far = torch.full((V,), 2 * D)
    rows = den.probs_given_neighbours(x, far, x.flip(0), far)
    got = _scores(rows)["entropy"]
    bound = ReferenceScoreBounds(den, "entropy", NEGENT_BOUND_SLACK)(x, far, x.flip(0), far)
    assert bool((bound - got).max() < 1e-3)
    assert bool((torch.log(dream_law(rows, 1.0, None, None).amax(-1)) - got).min() > 0.5)


def test_unknown_score_is_refused() -> None:
    with pytest.raises(ValueError, match="score must be one of"):
        ReferenceScoreBounds(OracleDenoiser(_chains()["tiny"]), "maskgit_plus", 0.0)


@pytest.mark.parametrize("name", ["uniform", "sparse"])
@pytest.mark.parametrize("alg", ["entropy", "topk_margin"])
@pytest.mark.parametrize("tie_rule", ["lowest", "highest", "random"])
def test_envelope_draws_the_dense_ranking(monkeypatch, name, alg, tie_rule) -> None:
    """With keys never memoised (as at V = 4096): envelope on, envelope off and dense ranking draw alike, and the
    envelope scores fewer rows than the max-probability bound alone."""
    monkeypatch.setattr(neighbourhood_rows, "MAX_KEYS", 0)
    den = OracleDenoiser(_chains()[name])
    rows = []
    real = den.probs_given_neighbours

    def counted(*query):
        rows.append(query[0].numel())
        return real(*query)

    monkeypatch.setattr(den, "probs_given_neighbours", counted)
    T, steps = 96, 24
    out, used = {}, {}
    for mode in ("envelope", "bound", "dense"):
        s = Dream(den, alg=alg, temperature=1.0, tie_rule=tie_rule)
        s.use_score_envelope = mode == "envelope"
        s.use_score_bound = mode != "dense"
        rows.clear()
        out[mode] = s.generate_with_stats(torch.arange(8), T, steps, 11)
        used[mode] = sum(rows)
    for mode in ("envelope", "bound"):
        assert torch.equal(out[mode][0], out["dense"][0]) and torch.equal(out[mode][1]["nfe"], out["dense"][1]["nfe"])
    if name == "sparse" and alg == "entropy":
        assert used["envelope"] < used["bound"]
