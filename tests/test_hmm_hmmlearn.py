"""The HMM posterior against hmmlearn's forward-backward on random HMMs (float64, tolerance 1e-9).

hmmlearn gives state posteriors gamma_t(s) = p(s_t | z) of a categorical HMM over the noisy symbols, with
emission p(z | s) = sum_v B(s, v) p(z | v); the token posterior follows as
p(x_t = v | z) = sum_s gamma_t(s) B(s, v) p(z_t | v) / p(z_t | s).  Absorbing masks use p(MASK | v) = m for
every v (the posterior does not depend on m)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import ABSORBING, UniformNoise, hmm_posterior
from test_hmm_world import random_world

hmm = pytest.importorskip("hmmlearn.hmm")
pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("channel, S, V", [(ABSORBING, 5, 4), (UniformNoise(0.7), 6, 3), (ABSORBING, 12, 5)])
def test_posterior_matches_hmmlearn(channel, S, V) -> None:
    world = random_world(S=S, V=V, seed=S)
    x = world.sample(8, 30, seed=1)
    g = torch.Generator().manual_seed(2)
    if channel is ABSORBING:
        z = torch.where(torch.rand(x.shape, generator=g) < 0.5, world.mask_id, x)
        pz = torch.cat([0.7 * torch.eye(V, dtype=torch.float64), torch.full((1, V), 0.3, dtype=torch.float64)])
    else:
        L = channel.likelihood(V)
        z = torch.where(torch.rand(x.shape, generator=g) < 1 - channel.alpha, torch.randint(0, V, x.shape, generator=g), x)
        pz = L  # p(z | v): rows sum to 1 over z
    emission = (world.B @ pz.T).numpy()  # p(z | s) [S, Z]
    model = hmm.CategoricalHMM(n_components=S, n_features=pz.shape[0], implementation="scaling", init_params="",
                               params="")
    model.startprob_, model.transmat_, model.emissionprob_ = world.initial.numpy(), world.A.numpy(), emission
    gamma = torch.from_numpy(model.predict_proba(z.reshape(-1, 1).numpy(), lengths=[z.shape[1]] * z.shape[0]))
    gamma = gamma.reshape(z.shape[0], z.shape[1], S)
    Ez = torch.from_numpy(emission)[:, z].permute(1, 2, 0)  # p(z_t | s) [N, T, S]
    ref = torch.einsum("nts,sv->ntv", gamma / Ez, world.B) * pz[z]
    ref = ref / ref.sum(-1, keepdim=True)
    assert (hmm_posterior(world, z, channel) - ref).abs().max() <= 1e-9
