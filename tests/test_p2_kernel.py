"""P2's compiled bounded step (``decoding/p2_kernel.py``) gives the numbers of its torch mirror
(``BoundedPlanning.step`` without numba): samples, uniforms and draws compared exactly (``torch.equal``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import counted_calls
from dllm_lit import rng
from dllm_lit.decoding import p2_bounded
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers.hmm_first_order import numba_available
from dllm_lit.samplers import P2
from dllm_lit.samplers.draws import StepUniforms, categorical_from_cdf
from test_bounded_refinement import CHAINS, P2_OPTIONS

pytestmark = [pytest.mark.usefixtures("single_thread"),
              pytest.mark.skipif(not numba_available(), reason="the compiled step needs the optional extra `fast`")]


def test_hash_uniforms_are_the_step_uniforms() -> None:
    u = StepUniforms(5, torch.arange(7), 64)
    for step in (0, 3, 63):
        assert torch.equal(p2_bounded.BoundedPlanning.uniforms(u, step, 300), u.grid(step, 300))


def test_compiled_draws_are_the_inverse_cdf_draws() -> None:
    """Rows with zero entries (tied cdf values), a zero row, an all-NaN row (0/0 of a tempered zero row) and
    uniforms at the ends of (0, 1): the stored-cdf draw of ``draw_stored``."""
    from dllm_lit.decoding.p2_kernel import _draw, _uniform

    g = torch.Generator().manual_seed(0)
    for V in (1, 2, 5, 27, 64, 65, 300):
        p = torch.rand(40, V, generator=g, dtype=torch.float64)
        p[torch.rand(40, V, generator=g) < 0.4] = 0.0
        p[0] = 0.0
        p[1] = float("nan")
        cdf = p.cumsum(-1)
        h = torch.randint(-2**62, 2**62, (40,), generator=g)
        j = torch.randint(0, 1000, (40,), generator=g)
        u = torch.tensor([_uniform(int(h[s]), 16 * int(j[s])) for s in range(40)], dtype=torch.float64)
        assert torch.equal(u, rng.uniform_from_hash(h, 16 * j))
        got = torch.tensor([_draw(cdf.numpy(), np.zeros(1, np.int64), True, s, int(h[s]), int(j[s]))
                            for s in range(40)])
        assert torch.equal(got, categorical_from_cdf(cdf, u)), V


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("case", range(len(P2_OPTIONS)))
def test_compiled_steps_are_the_torch_steps(monkeypatch, name: str, case: int) -> None:
    """Samples of the compiled step and of its torch mirror, every option set of the bounded tests."""
    den, options = OracleDenoiser(CHAINS[name]), P2_OPTIONS[case]
    calls = counted_calls(monkeypatch, p2_bounded.BoundedPlanning, "_compiled")
    got = [P2(den, **options).generate_with_nfe(torch.arange(8), 48, s, 5)[0] for s in (3, 16, 48)]
    assert calls
    monkeypatch.setattr(p2_bounded, "numba_available", lambda: False)
    want = [P2(den, **options).generate_with_nfe(torch.arange(8), 48, s, 5)[0] for s in (3, 16, 48)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_a_nan_bound_leaves_the_step_to_torch() -> None:
    """A NaN weight: the kernel returns False and writes nothing (the torch step then takes the sort's order)."""
    from dllm_lit.decoding.p2_kernel import plan_step

    z = np.array([[3, 0, 3, 1]], dtype=np.int64)  # mask id 3, V = 3
    W = np.log(np.full((4, 4), 0.25))
    W[2, 3] = np.nan
    x0 = z.copy()
    guess = np.zeros(1)
    ok = plan_step(z, np.arange(4, dtype=np.int64), W.reshape(-1), 4, np.zeros((1, 4)),
                   np.cumsum(np.full((4, 3), 1 / 3), 1), np.zeros(0, np.int64), True, np.zeros(1, np.int64), 3, 2,
                   1.0, 0.5, guess, False, x0)
    assert not ok and np.array_equal(x0, z) and guess[0] == 0.0
