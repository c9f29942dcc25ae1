"""GIDD mixed-noise sampler (MaskedUniform channel, exact leave-one-out oracle): output law equals the exact law of its
algorithm (DP over the (V + 1)^T noisy states), the forward channel matches upstream's schedule, NFE, bad settings."""
from __future__ import annotations

import math

import pytest

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers.gidd import GIDD, gidd_channel
from dllm_lit.exact import chain_law, gidd_law
from test_duo import CountingLOO

pytestmark = pytest.mark.usefixtures("single_thread")
V, T, N = 3, 4, 20000
ALPHA = 0.01  # goodness-of-fit level


@pytest.mark.parametrize("steps, p_uniform, gamma, min_p", [
    (1, 0.1, 1.0, 0.0), (2, 0.1, 1.0, 0.0), (4, 0.2, 1.0, 0.0), (3, 0.0, 1.0, 0.0), (3, 0.5, 2.0, 0.0),
    (3, 0.2, 1.0, 0.1),
])
def test_law_matches_dynamic_programming(chain, den, steps, p_uniform, gamma, min_p) -> None:
    law = gidd_law(chain, T, steps, p_uniform, gamma, min_p=min_p)
    x = GIDD(den, p_uniform=p_uniform, gamma=gamma, min_p=min_p).sample(N, T, steps, seed=steps + 20)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_converges_to_the_chain(chain) -> None:
    """Total variation to the chain's law falls with the steps (exact laws at 1, 3, 8 steps)."""
    exact = chain_law(chain, T)
    tv = [0.5 * (gidd_law(chain, T, s) - exact).abs().sum().item() for s in (1, 3, 8)]
    assert tv[0] > tv[1] > tv[2]


def test_channel_is_upstream_schedule() -> None:
    """alpha_t = (1 - t) / C_t, uniform share c_t / C_t, MASK t / C_t, c_t = 2^gamma p_u / (1 - p_u) (t (1 - t))^(gamma/2)."""
    for t, p_u, g in ((0.5, 0.1, 1.0), (0.1, 0.2, 2.0), (0.9, 0.0, 1.0)):
        c = 2 ** g * max(p_u, math.exp(-20)) / (1 - max(p_u, math.exp(-20))) * (t * (1 - t)) ** (g / 2)
        ch = gidd_channel(t, p_u, g)
        assert math.isclose(ch.alpha, (1 - t) / (1 + c), rel_tol=1e-12)
        assert math.isclose(1 - ch.alpha - ch.beta, t / (1 + c), rel_tol=1e-12)


def test_nfe_counts_denoiser_calls(chain, den) -> None:
    counting = CountingLOO(den)
    s = GIDD(counting).connect(chain)
    s.sample(5, 6, 4, seed=0)
    assert counting.calls == s.nfe(6, 4) == 4


def test_law_in_an_hmm_world() -> None:
    """Through HMMOracleDenoiser (MaskedUniform channel, leave-one-out forward-backward) the law is the DP's."""
    from test_duo import tiny_hmm

    world = tiny_hmm()
    x = GIDD().connect(world).sample(N, T, 2, seed=43)
    assert chi_square_pvalue(sequence_counts(x, V), gidd_law(world, T, 2)) > ALPHA


def _dense_step_law(x, z, ch_t, ch_s):
    """The step law by the dense formula (padded x, one-hot q_ts): the reference of the one-buffer form."""
    import torch
    V = x.shape[-1]
    bp = [torch.cat([torch.full((V,), c.beta / V, dtype=torch.float64),
                     torch.tensor([max(1.0 - c.alpha - c.beta, 0.0)], dtype=torch.float64)]) for c in (ch_t, ch_s)]
    xp = torch.cat([x, torch.zeros(x.shape[:-1] + (1,), dtype=torch.float64)], -1)
    q_s, q_t = ch_s.alpha * xp + bp[1], ch_t.alpha * xp + bp[0]
    a_ts = ch_t.alpha / ch_s.alpha
    q_ts = a_ts * torch.nn.functional.one_hot(z, V + 1).to(torch.float64) + (bp[0] - a_ts * bp[1])[z].unsqueeze(-1)
    return q_ts * q_s / q_t.gather(-1, z.unsqueeze(-1))


@pytest.mark.parametrize("t,s,p_uniform", [(0.9, 0.8, 0.1), (0.5, 0.3, 0.0), (0.2, 0.0, 0.5), (0.999, 0.5, 0.1)])
def test_step_law_equals_the_dense_formula(t, s, p_uniform) -> None:
    """The one-buffer step law (issue 39: no one-hot, q_t only at z_t) gives the dense formula's bits."""
    import torch
    from dllm_lit.samplers.gidd import gidd_step_law
    g = torch.Generator().manual_seed(3)
    x = torch.rand(5, 40, 27, generator=g, dtype=torch.float64)
    x /= x.sum(-1, keepdim=True)
    x[0, :2] = torch.nn.functional.one_hot(torch.tensor([0, 26]), 27).to(torch.float64)
    z = torch.randint(0, 28, (5, 40), generator=g)  # 27 = MASK
    ch_t, ch_s = gidd_channel(t, p_uniform, 1.0), gidd_channel(s, p_uniform, 1.0)
    assert torch.equal(gidd_step_law(x, z, ch_t, ch_s), _dense_step_law(x, z, ch_t, ch_s))
