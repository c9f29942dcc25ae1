"""The capabilities EB and KLASS declare as rules (issue 35): ``prefix_decides`` (an adaptive count fixed by a prefix of
the sorted scores) and stability (``divergence`` / ``stable_commits``, the engine keeping the previous rows) change
only the work, never the draws; no sampler module drives the confidence loop (``decode_blocks``) itself."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import synthetic_chain
from dllm_lit.samplers import KLASS, EBSampler
from dllm_lit.samplers.rule import RuleSampler

pytestmark = pytest.mark.usefixtures("single_thread")
SAMPLERS = Path(__file__).resolve().parents[1] / "dllm_lit" / "samplers"


def test_no_sampler_module_calls_the_confidence_loop() -> None:
    """EB and KLASS are rules; the loop's flags are the engine's (its one caller: decoding/providers.py)."""
    callers = [p.name for p in SAMPLERS.glob("*.py") if re.search(r"\bdecode_blocks\b", p.read_text())]
    assert callers == [] and issubclass(EBSampler, RuleSampler) and issubclass(KLASS, RuleSampler)


class _SortedEB(EBSampler):
    """The EB-sampler with a prefix that never decides: every step sorts all scores (no gap decoding)."""

    def prefix_decides(self, prefix: torch.Tensor) -> torch.Tensor:
        return torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)


def _eager(cls: type) -> type:
    """``cls`` reading stability everywhere: the engine computes every divergence it would otherwise skip."""
    def everywhere(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(scores, dtype=torch.bool)

    return type(f"Eager{cls.__name__}", (cls,), {"stability_read": everywhere})


class _TotalVariation(KLASS):
    """A stability rule of one's own: KLASS's test on the total variation of consecutive posteriors."""

    def divergence(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return 0.5 * (p.to(torch.float64) - q.to(torch.float64)).abs().sum(-1)


@pytest.fixture(scope="module")
def den() -> OracleDenoiser:
    return OracleDenoiser(synthetic_chain(12, 3, eps=0.1, seed=2))


def _draws(s, den, T: int = 40, steps: int = 8, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    s.connect(den.chain)
    s.use_cache = cache
    return s.generate_with_nfe(torch.arange(8), T, steps, 5)


@pytest.mark.parametrize("options", [dict(gamma=0.3, temperature=1.0), dict(gamma=1.0, temperature=0.0),
                                     dict(gamma=0.0, temperature=0.7, tie_rule="highest")])
def test_prefix_decides_changes_no_draw(den, options) -> None:
    x0, n0 = _draws(EBSampler(den, **options), den)
    x1, n1 = _draws(_SortedEB(den, **options), den)
    assert EBSampler(den).prefix_count and torch.equal(x0, x1) and torch.equal(n0, n1)


@pytest.mark.parametrize("options", [dict(conf_threshold=0.2, kl_threshold=0.45),
                                     dict(conf_threshold=0.2, kl_threshold=0.3, history=1, block_length=20),
                                     dict(conf_threshold=0.2, kl_threshold=0.45, temperature=1.0)])
def test_stability_paths_change_no_draw(den, options) -> None:
    """Lazy, eager and cache-free divergences give the same commits, for KLASS and for a rule of one's own."""
    for cls in (KLASS, _TotalVariation):
        x0, n0 = _draws(cls(den, **options), den, cache=False)
        for s in (cls(den, **options), _eager(cls)(den, **options)):
            x, n = _draws(s, den)
            assert torch.equal(x0, x) and torch.equal(n0, n), (cls.__name__, options)
    never_stable = {**options, "kl_threshold": 0.0}  # no KL is below 0: LLaDA's commits only
    assert not torch.equal(_draws(KLASS(den, **options), den)[0], _draws(KLASS(den, **never_stable), den)[0])


def test_a_rule_declaring_scores_by_prob_scores_the_posterior_probability() -> None:
    """``scores_by_prob`` (a ``score`` marked ``posterior_probability_score``): the engine scores from the draw's
    p(tok) by ``score_from_probability`` instead of calling ``score``, so every exported rule that declares it must
    score exactly that (PC-Sampler's calibrated confidence included; a subclass overriding ``score`` loses the mark)."""
    from dllm_lit import samplers

    g = torch.Generator().manual_seed(0)
    probs = torch.rand(6, 5, generator=g, dtype=torch.float64)
    probs = probs / probs.sum(1, keepdim=True)
    tok, pos = torch.randint(0, 5, (6,), generator=g), torch.arange(6) + 3
    declaring = [c for c in samplers.load_all() if isinstance(c, type) and issubclass(c, RuleSampler)
                 and getattr(c.score, "posterior_probability", False)]
    assert {c.__name__ for c in declaring} == {"LLaDA", "FastDLLM", "PCSampler"}
    chain = synthetic_chain(5, 3, eps=0.1, seed=0)
    p_tok = probs.gather(1, tok[:, None]).squeeze(1)
    for cls in declaring:
        rule = cls()
        rule.connect(chain)
        assert rule.scores_by_prob
        assert torch.equal(rule.score(probs, tok, pos), rule.score_from_probability(p_tok, tok, pos)), cls.__name__
        if cls.__name__ != "PCSampler":  # PC-Sampler: exp(-lambda i) min(alpha, p(tok) (-log pi(tok)))
            assert torch.equal(rule.score(probs, tok, pos), p_tok), cls.__name__


def test_llada_computes_each_drawn_row_once_where_rows_are_not_memoised(monkeypatch) -> None:
    """Where the distinct neighbourhoods exceed the memo (here a memo of 4 rows; at V = 4096, N = 64 they do),
    LLaDA's confidence is read from the draw's row: no second row per proposal (after the port to a rule the score
    recomputed every drawn row: 1.9x the CPU of the 64-step row at V = 4096).  The draws do not change."""
    from dllm_lit.decoding import compact_decoding
    from dllm_lit.samplers import LLaDA

    chain = synthetic_chain(512, 32, 1e-4, 1.1, 0)
    memoised = LLaDA(OracleDenoiser(chain), temperature=1.0).sample(num_sequences=4, seq_len=64, steps=8, seed=3)
    monkeypatch.setattr(compact_decoding, "ROW_CHUNK_ELEMENTS", 4 * 512)
    den = OracleDenoiser(chain)
    rows, real = [], den.probs_given_neighbours
    monkeypatch.setattr(den, "probs_given_neighbours", lambda *q: rows.append(q[0].numel()) or real(*q))
    x = LLaDA(den, temperature=1.0).sample(num_sequences=4, seq_len=64, steps=8, seed=3)
    assert torch.equal(x, memoised)
    drawn = 4 * 64  # every position is drawn at least once; the score asks for no further rows
    assert drawn <= sum(rows) < 2 * drawn, sum(rows)


def test_scores_by_law_follows_the_marked_score() -> None:
    """``scores_by_law`` (a ``score`` marked ``law_probability_score``): Dream's maskgit_plus score is q(x̂) under its
    proposal law and the engine reads it from the draw; the mark's condition leaves Dream's other algorithms out, and
    a subclass that overrides ``score`` (here: the least confident first) drops the mark and is ranked by its own."""
    from dllm_lit.samplers import Dream
    from dllm_lit.samplers.dream import dream_law

    class LeastConfident(Dream):
        def score(self, probs, tok, pos):
            return -super().score(probs, tok, pos)

    g = torch.Generator().manual_seed(0)
    probs = torch.rand(6, 5, generator=g, dtype=torch.float64)
    tok, pos = torch.randint(0, 5, (6,), generator=g), torch.arange(6)
    plus = Dream(alg="maskgit_plus", temperature=0.8)
    assert plus.scores_by_law and not Dream(alg="entropy").scores_by_law
    q = dream_law(probs, 0.8, None, None)
    assert torch.equal(plus.score(probs, tok, pos), q.gather(1, tok[:, None]).squeeze(1))
    assert not LeastConfident(alg="maskgit_plus", temperature=0.8).scores_by_law
    den = OracleDenoiser(synthetic_chain(12, 3, eps=0.1, seed=2))
    for t in (1.0, 0.8):  # at temperature 1 the draws are bounded: the law's provider computes q(x̂) anyway
        x_plus = _draws(Dream(den, alg="maskgit_plus", temperature=t), den)[0]
        x_least = _draws(LeastConfident(den, alg="maskgit_plus", temperature=t), den)[0]
        assert not torch.equal(x_plus, x_least), t  # the flag, an attribute before, kept q(x̂) at t = 1
