"""dllm_lit.exact: the named laws agree with the test-suite's own DP and are probability vectors."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.exact import LAWS, chain_law, llada_law
from test_llada import llada_law as llada_dp

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("steps, temperature, block_length", [(2, 1.0, None), (4, 0.5, 2), (4, 1.0, None)])
def test_llada_law_equals_the_llada_dp(chain, steps, temperature, block_length) -> None:
    torch.testing.assert_close(llada_law(chain, 4, steps, temperature=temperature, block_length=block_length),
                               llada_dp(chain, 4, steps, "low_confidence", temperature, block_length), atol=1e-12, rtol=0)
    torch.testing.assert_close(llada_law(chain, 4, steps, temperature=temperature, remasking="random",
                                         block_length=block_length),
                               llada_dp(chain, 4, steps, "random", temperature, block_length), atol=1e-12, rtol=0)


def test_prompt_is_an_exact_chain_prefix(chain) -> None:
    """With one step per token the LLaDA rule is still biased, but its prompt marginal is the chain's."""
    law = llada_law(chain, 4, 3, prompt_len=1).view(3, 27)
    torch.testing.assert_close(law.sum(1), chain.stationary, atol=1e-12, rtol=0)


def test_dream_origin_law_equals_the_dream_dp(chain) -> None:
    from dllm_lit.exact import dream_law, dream_origin_law

    torch.testing.assert_close(dream_origin_law(chain, 4, 3, temperature=1.0), dream_law(chain, 4, 3, "origin", 1.0),
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("alg", ["origin", "maskgit_plus", "topk_margin", "entropy"])
def test_dream_prompt_is_an_exact_chain_prefix(chain, alg) -> None:
    from dllm_lit.exact import dream_law

    law = dream_law(chain, 4, 2, alg, 1.0, prompt_len=1).view(3, 27)
    torch.testing.assert_close(law.sum(1), chain.stationary, atol=1e-12, rtol=0)


def test_every_named_law_is_a_distribution(chain) -> None:
    options = {"mdlm": {"steps": 2}, "block_mdlm": {"block_size": 2, "steps": 2}, "llada": {"steps": 2},
               "fast_dllm": {"threshold": 0.7}, "eb": {"gamma": 0.3}, "dream_origin": {"steps": 2},
               "dream": {"steps": 2, "alg": "entropy"}, "mdlm_paper": {"steps": 2}, "pc_sampler": {"steps": 2},
               "sedd": {"steps": 2}, "maskgit": {"steps": 2, "choice_temperature": 1.0},
               "klass": {"steps": 2, "conf_threshold": 0.7, "kl_threshold": 0.05, "history": 1}, "chain": {}}
    assert set(options) == set(LAWS)
    for name, law in LAWS.items():
        T = 4 if name == "block_mdlm" else 3
        p = law(chain, T, **options[name])
        assert p.shape == (3**T,) and abs(float(p.sum()) - 1) < 1e-12 and bool((p >= 0).all()), name
    assert torch.equal(LAWS["chain"](chain, 3), chain_law(chain, 3))
