"""The bounded provider under adaptive counts (``dllm_lit.decoding.bounded_counts``, Fast-dLLM's threshold and factor
rules): its ``count_decided`` is sound against brute force, and it draws what the dense direct path draws (samples
and NFE per sequence, torch.equal) under every tie rule, with thresholds that cut through exact ties."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import FastDLLM
from dllm_lit.samplers.fast_dllm import factor_count, threshold_count
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.decoding.providers import check_provider, choose_provider, decode_rule
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")

#: scores drawn from few values, so that rows hold exact ties (also at the factor rule's 1 - 1/(r+1))
LEVELS = torch.tensor([0.05, 0.5, 2 / 3, 0.75, 0.8, 0.9, 0.95, 1.0], dtype=torch.float64)


@pytest.mark.parametrize("rule", [FastDLLM(threshold=0.9), FastDLLM(threshold=0.75), FastDLLM(threshold=None,
                                  factor=1.0), FastDLLM(threshold=None, factor=0.5)], ids=lambda r: r.name)
def test_count_decided_is_sound_against_every_completion(rule) -> None:
    """Where count_decided says yes, every row that begins with the known scores and whose others are <= rest has
    the count of the known scores padded with -inf (random rows of tied levels, 20 completions each)."""
    g = torch.Generator().manual_seed(0)
    L, checked = 12, 0
    for _ in range(200):
        m = int(torch.randint(1, L + 1, (1,), generator=g))
        row = LEVELS[torch.randint(0, len(LEVELS), (m,), generator=g)].sort(descending=True).values
        known = int(torch.randint(0, m + 1, (1,), generator=g))
        rest = float(row[known]) if known < m else -torch.inf  # the largest unknown score is the bound
        if known < m and bool(torch.rand(1, generator=g) < 0.5):
            rest = float(LEVELS[LEVELS >= row[known]][0])  # a looser bound, still <= the last known score
            if known and rest > float(row[known - 1]):
                rest = float(row[known - 1])
        top = torch.full((1, L), -torch.inf, dtype=torch.float64)
        top[0, :known] = row[:known]
        n_masked = torch.tensor([m])
        if not bool(rule.count_decided(top, torch.tensor([known]), torch.tensor([rest], dtype=torch.float64),
                                       n_masked)):
            continue
        checked += 1
        want = rule.adaptive_count(top, n_masked)
        for _ in range(20):  # completions: the unknown scores anywhere in [0, rest]
            tail = LEVELS[LEVELS <= rest] if rest > -torch.inf else LEVELS[:0]
            full = top.clone()
            if m > known:
                full[0, known:m] = tail[torch.randint(0, len(tail), (m - known,), generator=g)].sort(
                    descending=True).values
            assert torch.equal(rule.adaptive_count(full, n_masked), want), (row, known, rest)
    assert checked > 50


def _run(s: RuleSampler, provider: str, idx: torch.Tensor, T: int, steps: int, seed: int):
    x, taken = s.initial_state(idx, T, seed), torch.zeros(idx.numel(), dtype=torch.float64)
    assert decode_rule(s, x, idx, steps, seed, taken=taken, provider=provider) == provider
    return x, taken


@pytest.fixture(scope="module")
def chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(5)
    peaked = torch.rand(8, 8, generator=g) * 0.1
    peaked[peaked < 0.04] = 0.0
    peaked += torch.eye(8).roll(1, 1)
    return {"english": english_char_chain(), "sparse_teleport": synthetic_chain(12, 4, eps=1e-3, seed=2),
            "peaked": MarkovChain.from_kernel(peaked / peaked.sum(1, keepdim=True))}


def _tied_confidence(chain: MarkovChain) -> float:
    """max_v p at a position with no revealed neighbour (every position of a fully masked block ties there)."""
    s = FastDLLM().connect(chain)
    x = torch.full((1, 8), s.mask_id, dtype=torch.long)
    return float(s.denoiser.probs_at(x, torch.tensor([0]), torch.tensor([3])).amax().double())


@pytest.mark.parametrize("chain_name", ["english", "sparse_teleport", "peaked"])
@pytest.mark.parametrize("options", [
    dict(threshold=0.9, temperature=1.0, tie_rule="lowest"), dict(threshold=0.9, temperature=1.0, tie_rule="random"),
    dict(threshold=0.4, temperature=0.0, block_length=8, tie_rule="highest"),
    dict(threshold="tie", temperature=0.0, tie_rule="lowest"), dict(threshold="tie", temperature=0.0, tie_rule="highest"),
    dict(threshold="above tie", temperature=0.0, block_length=16, tie_rule="highest"),
    dict(threshold="above tie", temperature=0.0, tie_rule="random"),
    dict(threshold=None, factor=1.0, temperature=1.0, tie_rule="lowest"),
    dict(threshold=None, factor=2.5, temperature=0.5, tie_rule="highest")],
    ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_bounded_adaptive_draws_what_the_dense_path_draws(chains, chain_name, options) -> None:
    chain = chains[chain_name]
    options = dict(options)
    if options["threshold"] in ("tie", "above tie"):  # exactly at (just above) an exact tie of every position
        tau = _tied_confidence(chain)
        options["threshold"] = tau if options["threshold"] == "tie" else float(torch.nextafter(
            torch.tensor(tau, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)))
        if options["threshold"] > 1:
            pytest.skip("this chain ties every position at confidence 1: no threshold lies above it (thresholds are at most 1)")
    rule = FastDLLM(**options).connect(chain)
    idx = torch.arange(2, 8)
    want = _run(rule, "dense", idx, 32, 4, 3)
    for provider in ("cache", "bounded"):
        got = _run(rule, provider, idx, 32, 4, 3)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), provider


def test_the_bounded_provider_is_chosen_where_keys_are_many(chains, monkeypatch) -> None:
    """Few neighbourhood keys (the English chain): the cache's rows per key are cheaper, it is chosen; many keys
    (the OWT-sized chain, here pretended): the bounded provider.  A rule without count_decided cannot take it."""
    rule = FastDLLM().connect(chains["english"])
    assert choose_provider(rule, rule.denoiser) == "cache"
    monkeypatch.setattr(NeighbourhoodRows, "applies", classmethod(lambda cls, den: False))
    assert choose_provider(rule, rule.denoiser) == "bounded"
    plain = type("NoCountDecided", (FastDLLM,), {"count_decided": RuleSampler.count_decided})().connect(
        chains["english"])
    assert choose_provider(plain, plain.denoiser) == "cache"
    with pytest.raises(ValueError, match="provider='bounded' cannot run NoCountDecided") as err:
        check_provider(plain, plain.denoiser, "bounded")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="provider"):
        check_provider(rule, rule.denoiser, "fast")


def test_threshold_and_factor_counts_unchanged() -> None:
    """The counts the bounded search evaluates on padded rows (-inf past the known scores)."""
    top = torch.tensor([[0.95, 0.9, 0.7, -torch.inf]], dtype=torch.float64)
    assert threshold_count(top, 0.9).tolist() == [2]
    assert factor_count(top, torch.tensor([4]), 1.0).tolist() == [2]  # 0.7 < 1 - 1/4
