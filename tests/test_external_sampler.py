"""ExternalSampler: the user's own sampler code on the oracle model, judged by conformance."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import TINY_KERNEL
from dllm_lit.exact.conformance import goodness_of_fit, two_sample
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.external import ExternalSampler, ExternalSamplerError
from dllm_lit.exact import chain_law, llada_law

pytestmark = pytest.mark.usefixtures("single_thread")
LLADA = "examples.llada_generate:generate"
ALPHA = 0.01


@pytest.fixture(scope="module")
def free_chain() -> MarkovChain:
    """A generic V = 3 kernel: with a prompt token every query has a left neighbour, so no two confidences of
    LLaDA's steps are mathematically equal (a tie-free chain)."""
    g = torch.Generator().manual_seed(5)
    K = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.1
    return MarkovChain.from_kernel(K / K.sum(1, keepdim=True))


def draw(sampler, n: int, T: int, steps: int, chunk: int = 4000, seed: int = 0) -> torch.Tensor:
    return torch.cat([sampler.generate(torch.arange(i, min(i + chunk, n)), T, steps, seed) for i in range(0, n, chunk)])


def llada_case(chain, generate: str, n: int):
    """The LLaDA example (one prompt token from pi, 3 generated tokens, 3 steps, temperature 1) and its exact law."""
    ext = ExternalSampler(steps=3, generate=generate, kwargs={"block_length": 3, "temperature": 1.0},
                          prompt_length=1).connect(chain)
    law = llada_law(chain, 4, 3, temperature=1.0, prompt_len=1)
    return draw(ext, n, 4, 3), law


def test_llada_example_follows_llada_and_a_broken_copy_is_caught(free_chain) -> None:
    """N = 4000 (the N = 20000 version is slow): the verbatim-style example conforms to the exact LLaDA law; the
    copy with one step's k off by one does not (p < 1e-6)."""
    x, law = llada_case(free_chain, LLADA, 4000)
    assert goodness_of_fit(x, law).p_value > ALPHA
    y, _ = llada_case(free_chain, "external_samplers:generate_k_off_by_one", 4000)
    assert goodness_of_fit(y, law).p_value < 1e-6


@pytest.mark.slow
def test_llada_example_at_n_20000(free_chain) -> None:
    """The acceptance sizes: V = 3, T = 4, N = 20000 against the exact law and the native LLaDA (two samples)."""
    x, law = llada_case(free_chain, LLADA, 20000)
    native = LLaDA(steps=3, temperature=1.0, prompt_mode="pi").connect(free_chain).sample(20000, 4, 3, seed=1)
    assert goodness_of_fit(x, law).p_value > ALPHA
    assert two_sample(x, native, 3).p_value > ALPHA
    y, _ = llada_case(free_chain, "external_samplers:generate_k_off_by_one", 20000)
    assert goodness_of_fit(y, law).p_value < 1e-6


@pytest.mark.slow
def test_llada_example_with_tie_jitter_matches_random_tie_rule(chain) -> None:
    """On a chain with exact ties (every position's row is pi at the first step; P(a, a) > 0), the jittered
    oracle breaks ties uniformly: the example then follows the native LLaDA with tie_rule random."""
    ext = ExternalSampler(steps=4, generate=LLADA, kwargs={"block_length": 4, "temperature": 1.0},
                          model_options={"tie_jitter": 1e-6}).connect(chain)
    native = LLaDA(steps=4, temperature=1.0, tie_rule="random").connect(chain).sample(20000, 4, 4, seed=1)
    assert two_sample(draw(ext, 20000, 4, 4), native, 3).p_value > ALPHA


def test_nfe_seeding_and_chunking(chain) -> None:
    ext = ExternalSampler(steps=2, generate="external_samplers:raises_at_four_steps").connect(chain)
    x, nfe = ext.generate_with_nfe(torch.arange(10), 4, 2, seed=3)
    assert torch.equal(nfe, torch.full((10,), 4.0))  # one call per position
    assert torch.equal(ext.generate(torch.arange(10), 4, 2, seed=3), x)  # same work item, same samples
    assert not torch.equal(ext.generate(torch.arange(10), 4, 2, seed=4), x)
    assert goodness_of_fit(draw(ext, 3000, 4, 2, chunk=500), chain_law(chain, 4)).p_value > ALPHA


@pytest.mark.parametrize("fn, message", [
    ("wrong_shape", r"returned shape \(5, 7\); expected \[B, T\] = \[5, 4\]"),
    ("out_of_range", "returned id 4, outside the chain's ids 0..2"),
    ("masks_left", "left the mask id 3 in 1 of 5 sequences"),
    ("float_ids", "returned dtype torch.float32; expected integer token ids"),
])
def test_bad_returns_end_in_one_line_naming_the_function(chain, fn, message) -> None:
    ext = ExternalSampler(steps=4, generate=f"external_samplers:{fn}").connect(chain)
    with pytest.raises(ExternalSamplerError, match=f"^external_samplers:{fn} {message}") as err:
        ext.generate(torch.arange(5), 4, 4, 0)
    assert "\n" not in str(err.value)


def test_cli_rows_metrics_and_a_failing_function(tmp_path, monkeypatch, capsys) -> None:
    """Rows of an ExternalSampler land in metrics.json like any row; a function that raises at the second steps
    value ends with one line naming it (exit status 2), and the finished rows stay on disk."""
    from dllm_lit.cli import main

    monkeypatch.setenv("DLLM_LIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "run"
    args = ["predict", "--model", "dllm_lit.samplers.ExternalSampler",
            "--model.generate", "external_samplers:raises_at_four_steps", "--model.steps", "[2, 4]",
            "--data.num_sequences", "16", "--data.seq_len", "8", "--trainer.default_root_dir", str(out),
            "--results.figures", "false", "--trainer.enable_progress_bar", "false"]
    with pytest.raises(SystemExit) as ex:
        main(args)
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: external_samplers:raises_at_four_steps raised KeyError: 'no schedule for 4 steps'"
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    assert [(r["sampler"], r["steps"]) for r in rows][:2] == [("ar", None), ("external_raises_at_four_steps", 2)]
    assert rows[1]["nfe"] == 8.0


def test_dream_example_with_logit_shift_follows_dream_origin(free_chain) -> None:
    """Dream's loop reads shifted logits; on the oracle with logit_shift 1 it follows the exact origin law."""
    from dllm_lit.exact import dream_origin_law

    ext = ExternalSampler(steps=3, generate="examples.dream_generate:diffusion_generate",
                          length_kwarg="max_new_tokens", mask_kwarg="mask_token_id", prompt_length=1,
                          kwargs={"temperature": 1.0, "alg": "origin"}, model_options={"logit_shift": 1}).connect(free_chain)
    law = dream_origin_law(free_chain, 4, 3, temperature=1.0, prompt_len=1)
    assert goodness_of_fit(draw(ext, 4000, 4, 3), law).p_value > ALPHA
    unshifted = ExternalSampler(steps=3, generate="examples.dream_generate:diffusion_generate",
                                length_kwarg="max_new_tokens", mask_kwarg="mask_token_id", prompt_length=1,
                                kwargs={"temperature": 1.0, "alg": "origin"}).connect(free_chain)
    assert goodness_of_fit(draw(unshifted, 4000, 4, 3), law).p_value < 1e-6  # the wrong layout is caught
