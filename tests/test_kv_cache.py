"""KV-cache approximations of a learned denoiser, on the RoFormer `fit` trains and a LLaDA-style bidirectional LLaMA.

Tolerances: a cache refreshed at every call equals the model's forward to 1e-5 in log-probability (float32, another
order of operations); ``cache: none`` is the unchanged code path (torch.equal); with one layer a cache whose context
tokens did not change is exact at the positions it recomputes (1e-5), and the positions it does not recompute keep the
logits of their last computation exactly.
"""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import HFDenoiser
from dllm_lit.denoisers.kv_stack import BidirectionalLlama
from dllm_lit.markov import synthetic_chain
from dllm_lit.samplers import LLaDA, MDLM, FastDLLM
from test_posterior_error import ModuleDenoiser, roformer

V, T = 5, 12
TOL = 1e-5
POLICIES = ("prefix", "dual", "delayed", "adaptive")


def llama(seed: int = 0, layers: int = 2) -> BidirectionalLlama:
    torch.manual_seed(seed)
    return BidirectionalLlama(dict(vocab_size=V + 1, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                                   initializer_range=0.3))


#: random models with weights large enough that the context moves the outputs
MODELS = {"roformer": lambda layers=2: roformer(vocab=V, positions=T, layers=layers, init=0.3), "llama": llama}


@pytest.fixture(scope="module")
def chain():
    return synthetic_chain(V, 2, eps=0.05, seed=1)


def _decode_states(chain, n: int = 3) -> list[torch.Tensor]:
    """A decode's states: all masked, then the positions of x revealed a few at a time, block [0, 6) first."""
    x = chain.sample(n, T, seed=9)
    order = [0, 3, 5, 1, 2, 4, 8, 6, 11, 7, 10, 9]
    states, z = [], torch.full((n, T), V)
    for k in range(0, T, 2):
        states.append(z.clone())
        z[:, order[k:k + 2]] = x[:, order[k:k + 2]]
    return states


def _run(den, states: list[torch.Tensor], bound) -> list[torch.Tensor]:
    den.bind(bound)
    den.decode_start(states[0].shape[0])
    outs = []
    for j, z in enumerate(states):
        if j in (0, 3):
            den.block_start(0, 6) if j == 0 else den.block_start(6, 12)
        outs.append(den(z).clone())  # the denoiser returns its row cache, updated in place
    return outs


@pytest.mark.parametrize("family", list(MODELS))
@pytest.mark.parametrize("cache", POLICIES)
def test_refresh_every_call_is_the_model(chain, family: str, cache: str) -> None:
    model = MODELS[family]()
    exact = _run(ModuleDenoiser(model), _decode_states(chain), chain)
    got = _run(ModuleDenoiser(model, cache=cache, refresh_interval=1), _decode_states(chain), chain)
    for a, b in zip(exact, got):
        assert torch.allclose(a.exp(), b.exp(), atol=TOL)


def test_cache_none_is_the_plain_path(chain) -> None:
    model = MODELS["roformer"]()
    a = LLaDA(ModuleDenoiser(model), steps=12, block_length=6, temperature=1.0).connect(chain).sample(4, T, seed=2)
    den = ModuleDenoiser(model, cache="none")
    b = LLaDA(den, steps=12, block_length=6, temperature=1.0).connect(chain).sample(4, T, seed=2)
    assert torch.equal(a, b) and den._kv is None and "cache" not in den.describe()


@pytest.mark.parametrize("family", list(MODELS))
def test_staleness_changes_the_expected_positions_only(chain, family: str) -> None:
    states = _decode_states(chain)[:3]  # inside block [0, 6): reveals at 0, 3 then 5, 1
    one = MODELS[family](layers=1)
    exact = [ModuleDenoiser(one).bind(chain)(z) for z in states]
    for cache, recomputed in (("dual", slice(0, 6)), ("prefix", slice(0, T))):
        got = _run(ModuleDenoiser(one, cache=cache), states, chain)
        for j in (1, 2):
            masked = states[j] == V
            inside = torch.zeros_like(masked)
            inside[:, recomputed] = True
            # recomputed positions: exact (one layer, every context token unchanged since the refresh)
            assert torch.allclose(got[j].exp()[masked & inside], exact[j].exp()[masked & inside], atol=TOL)
            # not recomputed: the logits of the block's first call (a refresh: the model's) kept exactly
            stale = masked & ~inside
            assert torch.equal(got[j][stale], got[0][stale])
            assert torch.allclose(got[0][stale].exp(), exact[0][stale].exp(), atol=TOL)
            if stale.any():
                assert not torch.allclose(got[j][stale].exp(), exact[j][stale].exp(), atol=TOL)
    got = _run(ModuleDenoiser(one, cache="delayed"), states, chain)  # masked positions recomputed every call
    for j in (1, 2):
        m = states[j] == V
        assert torch.allclose(got[j].exp()[m], exact[j].exp()[m], atol=TOL)
    two = MODELS[family](layers=2)  # two layers: cached keys of layer 2 carry the old context
    exact2 = ModuleDenoiser(two).bind(chain)(states[2])
    got2 = _run(ModuleDenoiser(two, cache="dual"), states, chain)[2]
    m = (states[2] == V)[:, :6]
    assert not torch.allclose(got2[:, :6].exp()[m], exact2[:, :6].exp()[m], atol=TOL)


def test_adaptive_thresholds_span_dual_and_exact(chain) -> None:
    model = MODELS["roformer"]()
    states = _decode_states(chain)
    dual = _run(ModuleDenoiser(model, cache="dual"), states, chain)
    lazy = ModuleDenoiser(model, cache="adaptive", drift_threshold=2.0)  # 1 - cos <= 2: never refreshes a layer
    assert all(torch.equal(a, b) for a, b in zip(dual, _run(lazy, states, chain)))
    assert lazy._kv.layer_refreshes == 0
    eager = ModuleDenoiser(model, cache="adaptive", drift_threshold=1e-12)  # any drift refreshes from layer 0
    exact = _run(ModuleDenoiser(model), states, chain)
    for a, b in zip(exact, _run(eager, states, chain)):
        assert torch.allclose(a.exp(), b.exp(), atol=TOL)
    assert eager._kv.layer_refreshes > 0


def test_a_cache_changes_the_samples_and_fastdllm_runs_it(chain) -> None:
    model = MODELS["roformer"]()
    plain = FastDLLM(ModuleDenoiser(model), steps=12, block_length=6).connect(chain)
    cached = FastDLLM(ModuleDenoiser(model, cache="dual"), steps=12, block_length=6).connect(chain)
    x, y = plain.sample(8, T, seed=3), cached.sample(8, T, seed=3)
    assert not torch.equal(x, y) and cached.denoiser._kv.partial_calls > 0  # stale context moves some draws


@pytest.mark.parametrize("kwargs, message", [
    (dict(cache="dual", refresh_interval=0), "refresh_interval"),
    (dict(cache="dual", refresh_interval=-2), "refresh_interval"),
    (dict(cache="fast"), "cache"),
    (dict(cache="adaptive", drift_threshold=0.0), "drift_threshold"),
])
def test_bad_settings_one_line(kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        ModuleDenoiser(roformer(vocab=V, positions=T), **kwargs)
    assert "\n" not in str(err.value)


def test_a_model_without_readable_keys_is_refused(chain, tmp_path) -> None:
    from transformers import BertConfig, BertForMaskedLM

    BertForMaskedLM(BertConfig(vocab_size=V + 1, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=16, max_position_embeddings=T, pad_token_id=None)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="cache='dual' needs a model whose keys and values") as err:
        HFDenoiser(str(tmp_path), cache="dual")
    assert "\n" not in str(err.value)
    HFDenoiser(str(tmp_path), cache="none")  # no cache: any masked LM


@pytest.mark.parametrize("make", [lambda d: MDLM(d, steps=4), lambda d: LLaDA(d, steps=4, remasking="random")])
def test_block_cache_with_a_non_block_sampler_is_refused(chain, make) -> None:
    with pytest.raises(ValueError, match="does not announce blocks") as err:
        make(ModuleDenoiser(roformer(vocab=V, positions=T), cache="dual")).connect(chain)
    assert "\n" not in str(err.value)
    make(ModuleDenoiser(roformer(vocab=V, positions=T), cache="delayed")).connect(chain)  # no block needed
