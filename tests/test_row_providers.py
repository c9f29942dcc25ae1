"""The engine's leave-one-out row providers (``dllm_lit/decoding/row_providers.py``): every provider gives the same
rows, equal to forward-backward; the memoised rows give LLaDA 2.1, WINO and P2 the draws of the uncached
computation; P2's selection equals the stable sort; no sampler module tests the denoiser's type.

Tolerances: rows against float64 forward-backward to 1e-6 (the float32 oracle's stated accuracy); everything else
exactly (``torch.equal`` on rows and samples)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers.channels import ABSORBING
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.samplers import LLaDA21, P2, WINO
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.samplers.p2 import lowest
from dllm_lit.decoding.row_providers import LeaveOneOutRows
from dllm_lit.samplers.wino import stable_ranks
from test_sampler_contract import CHAINS, GenericDenoiser  # teleport + sparse, and zero transitions

pytestmark = pytest.mark.usefixtures("single_thread")
ROOT = Path(__file__).resolve().parents[1]


def _state(V: int, B: int = 6, T: int = 40, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z = torch.randint(0, V, (B, T), generator=g)
    z[torch.rand(B, T, generator=g) < 0.6] = V
    z[0] = V  # the all-mask state
    return z


def _rows(provider: LeaveOneOutRows, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    feat, index = provider.rows(z, b, p)
    return feat["rows"].index_select(0, index)


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
def test_every_provider_gives_the_same_rows(chain_name: str, monkeypatch) -> None:
    """memo, neighbour (with and without keys), uncached and dense (the generic interface) rows are bit-equal, and
    equal forward-backward's leave-one-out law to 1e-6; the oracle's log_posterior is the log of the same rows."""
    chain = CHAINS[chain_name]
    den = OracleDenoiser(chain)
    V = chain.vocab_size
    z = _state(V)
    B, T = z.shape
    b, p = torch.arange(B).repeat_interleave(T), torch.arange(T).repeat(B)
    sub = torch.arange(0, B * T, 7)  # a few positions: the binary-search neighbour lookup

    def derive(rows):
        return {"rows": rows}

    providers = {"memo": LeaveOneOutRows(den, derive, z.device),
                 "uncached": LeaveOneOutRows(den, derive, z.device, cache=False),
                 "dense": LeaveOneOutRows(GenericDenoiser(den), derive, z.device)}
    assert [providers[k].provider for k in providers] == ["memo", "neighbour", "dense"]
    got = {name: _rows(pr, z, b, p) for name, pr in providers.items()}
    monkeypatch.setattr(NeighbourhoodRows, "applies", classmethod(lambda cls, d: False))
    keyed = LeaveOneOutRows(den, derive, z.device)
    assert keyed.provider == "neighbour"
    got["keyed"] = _rows(keyed, z, b, p)
    for name, rows in got.items():
        assert rows.dtype == torch.float64 and torch.equal(rows, got["uncached"]), name
        assert torch.equal(_rows(providers[name] if name in providers else keyed, z, b[sub], p[sub]), rows[sub]), name
    exact = hmm_posterior(HMMWorld.from_chain(chain), z, ABSORBING, leave_one_out=True)
    assert torch.allclose(got["uncached"], exact.reshape(B * T, V), atol=1e-6, rtol=0)
    assert torch.equal(den.posterior(z, ABSORBING, leave_one_out=True).reshape(B * T, V).double(), got["uncached"])
    assert torch.equal(den.log_posterior(z, ABSORBING, leave_one_out=True),
                       den.posterior(z, ABSORBING, leave_one_out=True).log())


#: (sampler, options) whose cached draws are compared with the uncached computation
CACHED = [
    (P2, {}), (P2, {"temperature": 0.0}), (P2, {"temperature": 0.7, "eta": 0.5, "gumbel_scale": 0.5}),
    (LLaDA21, {}), (LLaDA21, {"temperature": 0.0}), (LLaDA21, {"temperature": 0.7, "block_length": 16}),
    (LLaDA21, {"threshold": 0.3, "editing_threshold": 0.2}),
    (WINO, {"block_length": 16}), (WINO, {"temperature": 0.0, "wide_in_threshold": 0.3}),
]


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
@pytest.mark.parametrize("case", range(len(CACHED)))
def test_cached_rows_draw_what_the_uncached_rows_draw(case: int, chain_name: str) -> None:
    cls, options = CACHED[case]
    s = cls(OracleDenoiser(CHAINS[chain_name]), **options)
    for steps in (4, 32):
        x, nfe = s.generate_with_nfe(torch.arange(12), 32, steps, 5)
        x0, nfe0 = s.generate_with_nfe(torch.arange(12), 32, steps, 5, cache=False)
        assert torch.equal(x, x0) and torch.equal(nfe, nfe0), (cls.__name__, options, steps)


def test_lowest_is_the_stable_sort() -> None:
    """Ties (many equal values, -inf) go to the lower position, as with the stable sort."""
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        w = torch.randint(0, 4, (5, 17), generator=g).double()
        w[w == 0] = float("-inf")
        if trial % 2:
            w = w + torch.rand(5, 17, generator=g, dtype=torch.float64)
        for m in (1, 5, 16, 17):
            assert torch.equal(lowest(w, m), stable_ranks(w, descending=False) < m), (trial, m)
    w[0, 3] = float("nan")
    assert torch.equal(lowest(w, 9), stable_ranks(w, descending=False) < 9)


def test_no_sampler_module_tests_the_denoiser_type() -> None:
    """Issue 20: the engine's providers choose by what the denoiser declares; these sampler modules never look."""
    for name in ("llada21", "wino", "p2", "assd", "slowfast", "dus"):
        src = (ROOT / "dllm_lit" / "samplers" / f"{name}.py").read_text()
        assert "LocalDenoiser" not in src and "isinstance(self.denoiser" not in src, name
