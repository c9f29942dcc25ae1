"""The editing hook of the rule interface (``samplers/edit_rule.py``, run by ``decoding/editing.py``): a rule written
in a few lines that revisits revealed tokens gets the loop, the keyed randomness, the leave-one-out rows and NFE.

The recipe below decodes left to right (each call commits the leftmost masked position from p(x_i | x_<i)), then
makes ``sweeps`` systematic Gibbs sweeps: each call replaces one revealed token by a draw from its leave-one-out row
p(x_j | x_{-j}).  Both moves leave the chain's law invariant, so the samples follow it exactly (goodness of fit on
the tiny chain, p > 1e-3), while the sweeps do change tokens."""
from __future__ import annotations

import pytest
import torch

from conftest import all_sequences, chi_square_pvalue, sequence_counts
from dllm_lit.decoding import EditCall
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.samplers.edit_rule import EditRule

pytestmark = pytest.mark.usefixtures("single_thread")


class GibbsSweeps(EditRule):
    """Left-to-right ancestral calls, then ``sweeps`` Gibbs sweeps on the leave-one-out rows."""

    sampler_name = "gibbs_sweeps"
    edit_law = None  # the hook below

    def __init__(self, denoiser=None, steps=1, sweeps: int = 2) -> None:
        super().__init__(denoiser, steps)
        self.sweeps = sweeps

    def row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        f = super().row_features(rows)
        f["revisit"] = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)  # draw at revealed too
        return f

    def edit(self, call: EditCall, state: dict) -> tuple[torch.Tensor, torch.Tensor]:
        L = call.tokens.shape[1]
        col = (call.in_block % L)[:, None] == torch.arange(L)[None, :]  # the position this call writes
        new = torch.where(col, call.proposal, call.tokens)
        return new, call.in_block + 1 >= L * (1 + self.sweeps)


def test_an_editing_recipe_draws_the_chain_law_and_edits(chain) -> None:
    T, N = 3, 4000
    idx = torch.arange(N)
    x, nfe = GibbsSweeps(OracleDenoiser(chain), sweeps=2).generate_with_nfe(idx, T, 1, 11)
    expected = chain.log_prob(all_sequences(3, T)).exp()
    assert chi_square_pvalue(sequence_counts(x, 3), expected) > 1e-3
    assert torch.equal(nfe, torch.full((N,), 9.0, dtype=torch.float64))  # T calls + 2 sweeps of T, per sequence
    before = GibbsSweeps(OracleDenoiser(chain), sweeps=0).generate_with_nfe(idx, T, 1, 11)[0]
    assert 0.2 < (x != before).any(1).double().mean() < 0.9  # the sweeps replaced revealed tokens


def test_every_row_provider_draws_the_same_edits(chain) -> None:
    """The memoised rows and every call's rows afresh (``cache=False``): identical samples and NFE."""
    s = GibbsSweeps(OracleDenoiser(chain), sweeps=1)
    got = s.generate_with_nfe(torch.arange(64), 8, 1, 3)
    want = s.generate_with_nfe(torch.arange(64), 8, 1, 3, cache=False)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_an_undeclared_law_is_refused_in_one_line(chain) -> None:
    class Planned(GibbsSweeps):
        edit_law = "gibbs"

    with pytest.raises(ValueError, match=r"^edit_law must be one of None, 'refine', 'plan', got 'gibbs'$"):
        Planned().connect(chain)


def test_an_engine_law_never_asks_the_hook(chain) -> None:
    from dllm_lit.samplers import P2

    with pytest.raises(TypeError, match="declares edit_law='plan'"):
        P2(OracleDenoiser(chain)).edit(None, {})
