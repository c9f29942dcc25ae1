"""Denoiser evaluations per sequence (NFE) reported by every sampler; the rules are in docs/nfe.md."""
from __future__ import annotations

import pytest
import torch

from conftest import CountingDenoiser
from dllm_lit.samplers import AR, FHS, KLASS, LLaDA, MDLM, MaskGIT, MDLMPaper, ReMDM, SEDD


@pytest.mark.parametrize("decoding", ["ordered", "stepwise"])
@pytest.mark.parametrize("steps", [3, 16, 256])
def test_mdlm_counts_steps_that_unmask_plus_final_fill(den, decoding: str, steps: int) -> None:
    """Per sequence: the calls it takes part in when the denoiser is queried only where positions unmask."""
    counting = CountingDenoiser(den)
    x, nfe = MDLM(counting, decoding=decoding).generate_with_nfe(torch.arange(40), 12, steps, 3)
    assert torch.equal(nfe, counting.per_sequence(40))
    assert torch.equal(x, MDLM(den, decoding=decoding).generate_with_nfe(torch.arange(40), 12, steps, 3)[0])
    assert (nfe >= 1).all() and (nfe <= min(steps + 1, 12)).all()


def test_mdlm_many_steps_costs_at_most_T(den) -> None:
    for decoding in ("ordered", "stepwise"):
        _, nfe = MDLM(den, decoding=decoding).generate_with_nfe(torch.arange(16), 20, 20 * 64, 1)
        assert (nfe <= 20).all() and (nfe >= 15).all(), nfe


def test_fixed_counts(den) -> None:
    idx = torch.arange(5)
    assert MDLMPaper(den).nfe(20, 8) == 8 and MDLMPaper(den).nfe(20, 64) == 20
    assert LLaDA(den).nfe(20, 8) == 8 and LLaDA(den).nfe(20, 64) == 20
    assert LLaDA(den, block_length=5).nfe(20, 8) == 8 and LLaDA(den, block_length=5).nfe(20, 40) == 20
    assert LLaDA(den, prompt=[0, 1, 2, 0]).nfe(4, 8) == 0
    assert SEDD(den).nfe(20, 8) == 9
    assert ReMDM(den, variant="cap").nfe(20, 8) == 9
    assert MaskGIT(den).nfe(20, 8) == 8 and MaskGIT(den).nfe(20, 64) == 64
    assert FHS(den).nfe(20, 8) == 20
    ar = AR(chain=den.chain)
    assert ar.nfe(20, None) is None
    assert torch.isnan(ar.generate_with_nfe(idx, 20, None, 0)[1]).all()
    for s, expect in ((SEDD(den), 9.0), (ReMDM(den), 9.0), (MDLMPaper(den), 8.0), (FHS(den), 20.0)):
        assert torch.equal(s.generate_with_nfe(idx, 20, 8, 0)[1], torch.full((5,), expect, dtype=torch.float64))


def test_klass_counts_calls_until_each_block_is_done(den) -> None:
    counting = CountingDenoiser(den)
    s = KLASS(counting, conf_threshold=0.35, kl_threshold=0.01, history=1, temperature=1.0, block_length=6)
    x, nfe = s.generate_with_nfe(torch.arange(40), 12, 12, 2)
    # the proposal path queries the block once per step; the next block's rows are one more query per block
    # at a sequence's last call of a block, which is not a new evaluation
    ref = KLASS(den, conf_threshold=0.35, kl_threshold=0.01, history=1, temperature=1.0, block_length=6)
    ref.use_cache = False
    x2, nfe2 = ref.generate_with_nfe(torch.arange(40), 12, 12, 2)
    assert torch.equal(x, x2) and torch.equal(nfe, nfe2)
    assert torch.equal(nfe + 1, counting.per_sequence(40))  # + the next-block query of block 0
    assert (nfe < 12).any() and (nfe <= 12).all() and (nfe >= 2).all()
