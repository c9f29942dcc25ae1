"""A learned (tiny, randomly initialised, saved locally) masked LM behind the denoiser interface."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import HFDenoiser, OracleDenoiser
from dllm_lit.markov import english_char_chain
from dllm_lit.samplers import MDLM


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=28, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=64)
    path = tmp_path_factory.mktemp("ckpt") / "tiny-mlm"
    BertForMaskedLM(cfg).save_pretrained(path)
    return str(path)


def test_subs_parameterisation(checkpoint: str) -> None:
    den = HFDenoiser(checkpoint, vocab_size=27)
    z = torch.tensor([[3, 27, 27, 5, 27], [27, 27, 1, 27, 26]])
    lp = den(z)
    assert lp.shape == (2, 5, 27)
    probs = lp.exp()
    assert torch.allclose(probs.sum(-1), torch.ones(2, 5), atol=1e-5)
    assert probs[0, 0, 3] == 1 and probs[1, 4, 26] == 1  # carry-over at unmasked positions
    b, p = torch.tensor([1, 0]), torch.tensor([3, 2])
    assert torch.allclose(den.probs_at(z, b, p), probs[b, p], atol=1e-6)


def test_sampler_runs_with_learned_denoiser_and_differs_from_oracle(checkpoint: str) -> None:
    chain = english_char_chain()
    learned = MDLM(HFDenoiser(checkpoint, vocab_size=27))
    learned.connect(chain)
    x = learned.sample(6, 20, steps=4, seed=1)
    assert x.shape == (6, 20) and x.min() >= 0 and x.max() < 27
    oracle = MDLM(OracleDenoiser(chain)).sample(6, 20, steps=4, seed=1)
    assert not torch.equal(x, oracle)  # same randomness, different denoiser


def test_errors(checkpoint: str, tmp_path) -> None:
    with pytest.raises(ValueError, match="predicts 28 tokens"):
        HFDenoiser(checkpoint, vocab_size=40)
    with pytest.raises(OSError, match="cannot load the denoiser checkpoint"):
        HFDenoiser(str(tmp_path / "missing"), vocab_size=27)
    s = MDLM(HFDenoiser(checkpoint, vocab_size=27))
    from dllm_lit.markov import synthetic_chain

    with pytest.raises(ValueError, match="vocabulary"):
        s.connect(synthetic_chain(30, 3, eps=0.1))
