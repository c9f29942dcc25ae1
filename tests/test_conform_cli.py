"""python cli.py conform: the report, the verdict's exit status, two samples, bad input; the pytest helper."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.exact.conformance import assert_conforms, detectable_tv, goodness_of_fit
from dllm_lit.exact import chain_law
from dllm_lit.experiments.conform import named_chain
from dllm_lit.experiments.conform_cli import main

pytestmark = pytest.mark.usefixtures("single_thread")
EXT = ("{class_path: dllm_lit.samplers.ExternalSampler, init_args: {generate: '%s', "
       "kwargs: {block_length: 3, temperature: 1.0}, prompt_length: 1}}")
LAW = ["--law", "llada", "--law-options", "{temperature: 1.0, prompt_len: 1}", "--chain", "generic", "--steps", "3",
       "--samples", "3000", "--chunk", "1500"]


def test_example_conforms_and_broken_copy_differs(capsys) -> None:
    assert main(["--sampler", EXT % "examples.llada_generate:generate"] + LAW) == 0
    out = capsys.readouterr().out
    assert "dof" in out and "most over-sampled" in out and out.strip().splitlines()[-1].startswith("CONFORMS: p = ")
    assert main(["--sampler", EXT % "external_samplers:generate_k_off_by_one"] + LAW) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("DIFFERS: p = ")


def test_two_samples_of_exact_samplers(capsys) -> None:
    args = ["--sampler", "configs/fhs.yaml", "--against", "configs/ar.yaml", "--samples", "2000", "--seq-len", "3"]
    assert main(args) == 0
    assert "sampled vs ar" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--sampler", "configs/fhs.yaml", "--law", "nope"], "--law must be one of chain, mdlm"),
    (["--sampler", "configs/fhs.yaml", "--law", "chain", "--chain", "[[0.5, 0.6], [1, 0]]"], "--chain must be one of"),
    (["--sampler", "{init_args: {}}", "--law", "chain"], "--sampler must be a config file with a model: block"),
    (["--sampler", "configs/fhs.yaml", "--law", "chain", "--samples", "0"], "--samples must be >= 1"),
])
def test_bad_input_is_one_line(capsys, args, message) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and "\n" not in err


def test_pytest_helper_and_power() -> None:
    chain = named_chain("tiny")
    x = chain.sample(5000, 3, seed=0)
    res = assert_conforms(x, chain_law(chain, 3))
    assert res.passed and res.detectable_tv == detectable_tv(5000, res.dof)
    with pytest.raises(AssertionError, match="DIFFERS"):
        assert_conforms(x, other=torch.zeros(5000, 3, dtype=torch.long), vocab_size=3)
    # the stated power holds: a law at that TV is detected in most repetitions
    law = chain_law(chain, 3)
    shifted = law.clone()
    d = 1.2 * res.detectable_tv
    shifted[int(law.argmax())] -= d
    shifted[int(law.argmin())] += d
    g = torch.Generator().manual_seed(1)
    hits = 0
    for _ in range(20):
        codes = torch.multinomial(shifted, 5000, replacement=True, generator=g)
        samples = torch.stack([codes // 9, codes // 3 % 3, codes % 3], 1)
        hits += goodness_of_fit(samples, law).p_value <= 0.01
    assert hits >= 14  # power >= 0.8 claimed (seeded draws: a fixed outcome; at power 0.8 fewer than 14 hits has probability 0.09)


def _help_examples() -> list[list[str]]:
    import shlex

    from dllm_lit.experiments import conform

    text = conform.__doc__.replace("\\\n", " ")
    return [shlex.split(line.strip())[3:] for line in text.splitlines() if line.strip().startswith("python cli.py conform")]


@pytest.mark.parametrize("argv", _help_examples())
def test_every_help_example_runs(argv, capsys) -> None:
    """`cli.py conform --help` opens with these examples: each runs (here at N = 1500) and conforms."""
    assert main(argv + ["--samples", "1500"]) == 0, argv
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("CONFORMS")
