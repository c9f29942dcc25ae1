"""Fast-dLLM's bounded rounds on large vocabularies (``confidence_decoding.ADAPTIVE_FIRST`` positions scored first,
then rounds of ``ADAPTIVE_GROWTH``-fold size): the same samples and NFE per sequence as the dense direct path
(torch.equal) under every tie rule, with thresholds exactly at an exact tie of every position, and fewer rows scored
than the former 3-then-4x rounds (a count of rows, not a timing)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import FastDLLM
from dllm_lit.decoding import confidence_decoding as cd
from dllm_lit.decoding.posterior_cache import PosteriorCache as cache
from dllm_lit.decoding.providers import decode_rule
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")

CASES = [dict(threshold=0.9, temperature=1.0, tie_rule="lowest"),
         dict(threshold=0.3, temperature=1.0, tie_rule="random"),
         dict(threshold="tie", temperature=0.0, tie_rule="lowest"),
         dict(threshold="tie", temperature=0.0, tie_rule="highest"),
         dict(threshold="tie", temperature=0.0, tie_rule="random"),
         dict(threshold=None, factor=1.0, temperature=1.0, tie_rule="lowest"),
         dict(threshold=None, factor=0.5, temperature=0.5, tie_rule="highest")]


def _ids(o: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in o.items())


@pytest.fixture(scope="module")
def wide() -> MarkovChain:
    """A chain whose vocabulary takes the large-vocabulary rounds (V >= ROUNDS_MIN_VOCAB)."""
    return synthetic_chain(300, 6, eps=1e-3, seed=4)


def _rule(chain: MarkovChain, options: dict) -> FastDLLM:
    options = dict(options, block_length=8)
    if options["threshold"] == "tie":  # max_v p with no revealed neighbour: every position of the first block ties
        den = FastDLLM().connect(chain).denoiser
        x = torch.full((1, 8), den.mask_id, dtype=torch.long)
        options["threshold"] = float(den.probs_at(x, torch.tensor([0]), torch.tensor([3])).amax().double())
    return FastDLLM(**options).connect(chain)


def _run(rule: FastDLLM, provider: str, n: int = 4, T: int = 32, steps: int = 4, seed: int = 3):
    idx = torch.arange(1, n + 1)
    x, taken = rule.initial_state(idx, T, seed), torch.zeros(n, dtype=torch.float64)
    assert decode_rule(rule, x, idx, steps, seed, taken=taken, provider=provider) == provider
    return x, taken


def _same(a, b) -> bool:
    return torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("options", CASES, ids=_ids)
def test_large_vocabulary_rounds_draw_what_the_dense_path_draws(wide, options) -> None:
    rule = _rule(wide, options)
    assert rule.vocab_size >= cd.ROUNDS_MIN_VOCAB
    assert _same(_run(rule, "bounded"), _run(rule, "dense"))


@pytest.mark.parametrize("options", CASES[2:6], ids=_ids)
def test_small_vocabularies_under_the_large_rounds(monkeypatch, options) -> None:
    """The English chain (many exact ties) forced onto the large-vocabulary rounds draws what the dense path draws."""
    monkeypatch.setattr(cd, "ROUNDS_MIN_VOCAB", 2)
    rule = _rule(english_char_chain(), options)
    assert _same(_run(rule, "bounded", n=6), _run(rule, "dense", n=6))


def test_fewer_rows_than_three_then_fourfold(wide, monkeypatch) -> None:
    """The rows a run scores (posterior rows recomputed for a draw) drop against 3-then-4x rounds; same draws."""
    rule = _rule(wide, CASES[0])
    rows = [0]
    posterior = cache.posterior

    def counted(self, b, p):
        rows[0] += b.numel()
        return posterior(self, b, p)

    monkeypatch.setattr(cache, "posterior", counted)
    got = _run(rule, "bounded", n=8, T=64)
    now, rows[0] = rows[0], 0
    monkeypatch.setattr(cd, "ADAPTIVE_FIRST", 3)
    monkeypatch.setattr(cd, "ADAPTIVE_GROWTH", 4)
    before = _run(rule, "bounded", n=8, T=64)
    assert _same(got, before)
    assert now < rows[0], (now, rows[0])
