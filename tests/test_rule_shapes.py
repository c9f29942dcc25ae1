"""The rule capabilities of issue 35's last ports: decoding by cuts (MaskGIT) and per-block step grids (BD3).  Both
samplers are rules, and a cut rule written from the recipe (not MaskGIT) draws the same on the exact oracle's
bounded and compact paths as on the plain dense loop (its draws are keyed by (step, position))."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.samplers import BlockMDLM, MaskGIT
from dllm_lit.samplers.rule import RuleSampler

pytestmark = pytest.mark.usefixtures("single_thread")


class HalfCut(RuleSampler):
    """Keeps masked the lower half (at least one) of the proposals by p(x̂) plus Gumbel noise of scale 0.3."""

    sampler_name = "half_cut"

    def score(self, probs, tok, pos):
        return probs.gather(1, tok[:, None]).squeeze(1).to(torch.float64)

    def remasked(self, n, step, steps, masked):
        return max(1, masked // 2) if isinstance(masked, int) else (masked // 2).clamp(min=1)

    def gumbel_scale(self, step, steps):
        return 0.3


def test_maskgit_and_bd3_are_rules_declaring_their_shape() -> None:
    assert issubclass(MaskGIT, RuleSampler) and MaskGIT().cuts
    assert issubclass(BlockMDLM, RuleSampler) and not BlockMDLM().cuts and BlockMDLM().order == "random"
    assert BlockMDLM(block_size=8).step_grid(32, 4) == (4, None)
    assert BlockMDLM(block_size=8, grid="mdlm").step_grid(32, 4) == (5, 4)  # the argmax fill slot


@pytest.mark.parametrize("steps", [3, 8, 40])
def test_a_recipe_cut_rule_draws_the_same_on_every_path(chain, steps) -> None:
    rule = HalfCut(OracleDenoiser(chain))
    rule.connect(chain)
    cached = rule.generate(torch.arange(6), 24, steps, 11)
    rule.use_cache = False
    assert torch.equal(cached, rule.generate(torch.arange(6), 24, steps, 11))
    assert bool((cached != rule.mask_id).all())
