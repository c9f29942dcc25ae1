"""Psi predictor-corrector samplers on Duo's uniform-state diffusion (exact leave-one-out oracle): output law equals the
exact law of the algorithm (DP over V^T noisy states), kappa schedules as upstream's formulas, NFE, bad settings."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers.psi import Psi
from dllm_lit.samplers.uniform_state import duo_alpha
from dllm_lit.exact import duo_law, psi_law
from test_duo import CountingLOO

pytestmark = pytest.mark.usefixtures("single_thread")
V, T, N = 3, 4, 20000
ALPHA = 0.01  # goodness-of-fit level


@pytest.mark.parametrize("steps, modes, fracs", [
    (3, ("pure-pc", "constant-0.5", "pure-posterior"), (0.25, 0.5)),
    (4, ("pure-posterior", "max-capped-0.3", "pure-posterior"), (0.2, 0.6)),
    (4, ("constant-remdm-0.2", "max-rescale-0.5", "pure-pc"), (0.4, 0.4)),
])
def test_law_matches_dynamic_programming(chain, den, steps, modes, fracs) -> None:
    s = Psi(den, high_mode=modes[0], middle_mode=modes[1], low_mode=modes[2], high_frac=fracs[0], middle_frac=fracs[1])
    law = psi_law(chain, T, s.kappas(steps)[:steps])
    x = s.sample(N, T, steps, seed=steps + 30)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_pure_posterior_is_duo(chain) -> None:
    assert torch.allclose(psi_law(chain, T, [1.0] * 3), duo_law(chain, T, 3), atol=1e-15)
    s = Psi(high_mode="pure-posterior", middle_mode="pure-posterior", low_mode="pure-posterior")
    assert s.kappas(6) == [1.0] * 7


def test_kappas_follow_upstream_formulas() -> None:
    """max-capped-eta: kappa_j = clip(1 - min(eta, (1 - a_s) / a_t) / (1 - a_s), 0, 1), last point 1."""
    s = Psi(high_mode="pure-pc", middle_mode="max-capped-0.3", low_mode="constant-0.7", high_frac=0.25, middle_frac=0.5)
    ts = torch.linspace(1, 1e-5, 9, dtype=torch.float64).tolist()  # 8 steps: 9 points; phases 2 / 4 (round(4.5)) / 3
    k = s.kappas(8)
    assert k[:2] == [0.0, 0.0] and k[-3:] == [0.7] * 3 and len(k) == 9
    a = [duo_alpha(t) for t in ts[2:6]]
    expect = [min(max(1 - min(0.3, (1 - a_s) / a_t) / (1 - a_s), 0), 1) for a_t, a_s in zip(a, a[1:])] + [1.0]
    assert k[2:6] == pytest.approx(expect, abs=1e-15)


def test_nfe_counts_denoiser_calls(chain, den) -> None:
    counting = CountingLOO(den)
    s = Psi(counting).connect(chain)
    s.sample(5, 6, 4, seed=0)
    assert counting.calls == s.nfe(6, 4) == 5


@pytest.mark.parametrize("kappa", [1.0, 0.7, 0.0])
def test_step_law_equals_the_out_of_place_formula(kappa) -> None:
    """Psi's in-place step law (issue 39) gives the bits of k R(a_s) + (1 - k) uniform_forward(R(1), a_s)."""
    import torch
    from dllm_lit.samplers.psi import psi_step_law
    from dllm_lit.samplers.uniform_state import uniform_forward, uniform_reverse_step
    g = torch.Generator().manual_seed(5)
    x = torch.rand(4, 30, 27, generator=g, dtype=torch.float64)
    x /= x.sum(-1, keepdim=True)
    z = torch.randint(0, 27, (4, 30), generator=g)
    a_t, a_s = 0.35, 0.6
    ref = kappa * uniform_reverse_step(x, z, a_s, a_t)
    if kappa < 1:
        ref = ref + (1 - kappa) * uniform_forward(uniform_reverse_step(x, z, 1.0, a_t), a_s)
    assert torch.equal(psi_step_law(x, z, a_t, a_s, kappa), ref)
