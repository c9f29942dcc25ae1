"""python cli.py conform with each named law added to dllm_lit.exact: the native sampler conforms to its law.

Tiny chain (V = 3, exact ties), T = 4, N = 4000 samples, fixed seeds; pass = the command's verdict p > 0.01
(its default --alpha), exit status 0.  The laws' own DP-vs-sampler tests at N = 20000 live in the samplers'
test files; these check the command-line path (option defaults, steps from --steps, the law's registration).
"""
from __future__ import annotations

import pytest

from dllm_lit.experiments.conform_cli import main

pytestmark = pytest.mark.usefixtures("single_thread")
COMMON = ["--chain", "tiny", "--seq-len", "4", "--samples", "4000", "--chunk", "2000"]


@pytest.mark.parametrize("sampler, law, options, steps", [
    ("{class_path: dllm_lit.samplers.MDLMPaper}", "mdlm_paper", "{}", 3),
    ("{class_path: dllm_lit.samplers.Dream, init_args: {alg: origin, temperature: 1.0}}",
     "dream", "{alg: origin}", 3),
    ("{class_path: dllm_lit.samplers.Dream, init_args: {alg: maskgit_plus, temperature: 1.0}}",
     "dream", "{alg: maskgit_plus}", 2),
    ("{class_path: dllm_lit.samplers.Dream, init_args: {alg: topk_margin, temperature: 1.0, tie_rule: random}}",
     "dream", "{alg: topk_margin, tie_rule: random}", 3),
    ("{class_path: dllm_lit.samplers.Dream, init_args: {alg: entropy, temperature: 0.5, top_k: 2, tie_rule: highest}}",
     "dream", "{alg: entropy, temperature: 0.5, top_k: 2, tie_rule: highest}", 2),
    ("{class_path: dllm_lit.samplers.Dream, init_args: {alg: maskgit_plus, temperature: 1.0, alg_temp: 0.5}}",
     "dream", "{alg: maskgit_plus, alg_temp: 0.5}", 2),
    ("{class_path: dllm_lit.samplers.PCSampler, init_args: {temperature: 1.0, lambd: 0.0, alpha: 0.3, tie_rule: random}}",
     "pc_sampler", "{temperature: 1.0, lambd: 0.0, alpha: 0.3, tie_rule: random}", 2),
    ("{class_path: dllm_lit.samplers.SEDD, init_args: {beta: 2.0, predictor: euler}}",
     "sedd", "{beta: 2.0, predictor: euler}", 3),
])
def test_native_sampler_conforms_to_its_named_law(capsys, sampler, law, options, steps) -> None:
    code = main(["--sampler", sampler, "--law", law, "--law-options", options, "--steps", str(steps)] + COMMON)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0, "\n".join(out)
    assert out[-1].startswith("CONFORMS: p = ") and f"exact {law} law" in out[-1]


def test_a_different_alg_is_caught(capsys) -> None:
    """Power at the same N: Dream's maskgit_plus with positions sampled (alg_temp 0.5) is not the top-k law."""
    sampler = "{class_path: dllm_lit.samplers.Dream, init_args: {alg: maskgit_plus, temperature: 1.0, alg_temp: 0.5}}"
    assert main(["--sampler", sampler, "--law", "dream", "--law-options", "{alg: maskgit_plus}", "--steps", "2"]
                + COMMON) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("DIFFERS: p = ")


def test_docs_and_help_list_every_law_and_option(capsys) -> None:
    from pathlib import Path

    from dllm_lit.exact import LAWS
    from dllm_lit.experiments.conform import law_options

    docs = Path(__file__).resolve().parents[1].joinpath("docs", "oracle_model.md").read_text()
    with pytest.raises(SystemExit):
        main(["--help"])
    helptext = capsys.readouterr().out
    for name in LAWS:
        row = next((line for line in docs.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"docs/oracle_model.md has no row for the {name} law"
        line = next(line for line in helptext.splitlines() if line.startswith(f"  {name}: "))
        for opt in law_options(name):
            assert f"`{opt}`" in row and opt in line, (name, opt)


@pytest.mark.parametrize("law, options, message", [
    ("dreams", "{}", "--law must be one of chain, mdlm, mdlm_paper, block_mdlm, llada, fast_dllm, eb, dream,"),
    ("dream", "{algo: entropy}", "--law-options: 'algo' is not an option of the dream law; allowed: steps, alg,"),
    ("dream", "{alg: confidence}", "--law-options: alg must be one of origin, maskgit_plus, topk_margin, entropy"),
    ("sedd", "{predictor: tweedie}", "--law-options: predictor must be one of analytic, euler"),
    ("pc_sampler", "{tie_rule: left}", "--law-options: tie_rule must be one of lowest, highest, random"),
    ("llada", "{remasking: top}", "--law-options: remasking must be one of low_confidence, random"),
    ("maskgit", "{}", "--law-options: the maskgit law needs choice_temperature"),
    ("mdlm_paper", "{counts: [1, 1]}", "counts must be 3 round sizes summing to T 4"),
])
def test_bad_law_or_option_is_one_line(capsys, law, options, message) -> None:
    args = ["--sampler", "configs/fhs.yaml", "--law", law, "--law-options", options, "--steps", "3"] + COMMON
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message}") and "\n" not in err
