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
