"""The oracle model's logits dtype and conform's power (issue 40).

A float32 oracle model moved LLaDA's law on the generic V = 3 chain by TV 0.0156 (its softmax breaks exact ties
between positions by rounding), below what conform's former N = 20000 detected (TV 0.024).  Checked here: the
default float64 logits keep every ordering of two positions' confidences that the exact law decides, on every
evidence state of the README command (exact rational arithmetic as the reference); conform's default N detects
TV 0.01; the dtype note counts the tied states exactly; and, marked slow, the README command, a plain user loop
and the example against native LLaDA conform at N = 80000 while the float32 model and the off-by-one copy differ.
"""
from __future__ import annotations

import itertools
import re
from fractions import Fraction

import pytest
import torch

from dllm_lit.exact.conformance import detectable_tv, law_dof, samples_for_tv
from dllm_lit.exact import llada_law
from dllm_lit.experiments.conform import confidence_ties, named_chain
from dllm_lit.experiments.conform_cli import TARGET_TV, main
from dllm_lit.hf import OracleForMaskedLM

pytestmark = pytest.mark.usefixtures("single_thread")
README = ["--sampler", "examples/llada_conform.yaml", "--law", "llada", "--law-options",
          "{temperature: 1.0, prompt_len: 1}", "--chain", "generic", "--seq-len", "4"]
EXT = "{class_path: dllm_lit.samplers.ExternalSampler, init_args: {generate: '%s', steps: 3, prompt_length: 1%s}}"


def _exact_posteriors(chain, T: int, states):
    """p(x_i = v | z) as Fractions of the float kernel's exact values, by enumeration (None: impossible z)."""
    V, M = chain.vocab_size, chain.mask_id
    K = [[Fraction(float(chain.kernel[a, b])) for b in range(V)] for a in range(V)]
    pi = [Fraction(float(p)) for p in chain.stationary]
    prob = {}
    for s in itertools.product(range(V), repeat=T):
        p = pi[s[0]]
        for a, b in zip(s, s[1:]):
            p *= K[a][b]
        prob[s] = p
    out = []
    for z in states:
        cons = [s for s in prob if all(t == M or t == u for t, u in zip(z, s))]
        Z = sum(prob[s] for s in cons)
        out.append(None if Z == 0 else {(i, v): sum(prob[s] for s in cons if s[i] == v) / Z
                                        for i in range(T) if z[i] == M for v in range(V)})
    return out


def _misordered(chain, dtype: str, T: int = 4, prompt: int = 1) -> tuple[int, int]:
    """(pairs of two positions' confidences, pairs whose order - or tie - a user's softmax gets wrong)."""
    M = chain.mask_id
    states = [z for z in itertools.product(range(M + 1), repeat=T)
              if all(t != M for t in z[:prompt]) and sum(t == M for t in z) >= 2]
    conf = torch.softmax(OracleForMaskedLM.from_chain(chain, logits_dtype=dtype)(torch.tensor(states)).logits, -1)
    pairs = wrong = 0
    for k, ex in enumerate(_exact_posteriors(chain, T, states)):
        for (i, v), (j, w) in itertools.combinations(ex or {}, 2):
            if i != j:
                pairs += 1
                exact = (ex[i, v] > ex[j, w]) - (ex[i, v] < ex[j, w])
                wrong += exact != (conf[k, i, v] > conf[k, j, w]).item() - (conf[k, i, v] < conf[k, j, w]).item()
    return pairs, wrong


def test_default_logits_keep_every_ordering_the_exact_law_decides() -> None:
    """README command's chain (generic, T = 4, one prompt token), every evidence state: float64 (the default) ranks
    every pair of two positions' softmax confidences as the exact rationals do, ties included; float32 does not."""
    chain = named_chain("generic")
    assert OracleForMaskedLM.from_chain(chain).config.logits_dtype == "float64"
    pairs, wrong = _misordered(chain, "float64")
    assert pairs > 100 and wrong == 0
    assert _misordered(chain, "float32")[1] > 0


def test_tie_counts_match_exact_enumeration() -> None:
    """confidence_ties' tied-state count equals the count of states with an exactly tied pair (rationals)."""
    chain = named_chain("generic")
    M, T = chain.mask_id, 4
    states = [z for z in itertools.product(range(M + 1), repeat=T) if z[0] != M and sum(t == M for t in z) >= 2]
    tied = 0
    for ex in _exact_posteriors(chain, T, states):
        tied += any(i != j and ex[i, v] == ex[j, w] and ex[i, v] > 0
                    for (i, v), (j, w) in itertools.combinations(ex, 2))
    assert confidence_ties(chain, T, 1) == (len(states), tied, 0) and tied > 0
    assert confidence_ties(chain, 12, 0) is None  # (V + 1)^T above the bound: not computed


def test_tie_counts_in_worlds_beyond_first_order() -> None:
    """The dtype note reads the world's own posterior in order-2 and HMM worlds: the possible states with >= 2
    masked positions are counted (every evidence state is possible there), and their posteriors have no exact tie."""
    for name in ("order2", "hmm"):
        world = named_chain(name)
        M, T = world.vocab_size, 3
        states = [z for z in itertools.product(range(M + 1), repeat=T) if z[0] != M and sum(t == M for t in z) >= 2]
        states_n, tied, _ = confidence_ties(world, T, 1)
        assert states_n == len(states) and tied == 0


def test_default_n_detects_the_target_tv() -> None:
    law = llada_law(named_chain("generic"), 4, 3, temperature=1.0, prompt_len=1)
    n = samples_for_tv(TARGET_TV, lambda m: law_dof(law, m))
    assert detectable_tv(n, law_dof(law, n)) <= TARGET_TV < detectable_tv(0.98 * n, law_dof(law, 0.98 * n))
    assert detectable_tv(20000, law_dof(law, 20000)) > 0.0156  # the former default missed the float32 shift


def test_target_tv_sets_n_and_the_verdict_says_what_it_detects(capsys) -> None:
    assert main(["--sampler", "configs/fhs.yaml", "--law", "chain", "--seq-len", "2", "--target-tv", "0.08"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    n = int(re.search(r"N (\d+)", out[0]).group(1))
    tv = float(re.search(r"TV >= ([0-9.e-]+)", out[-1]).group(1))
    assert 50 < n < 2000 and tv <= 0.08 and "dtype-sensitive" not in "\n".join(out)  # the chain law ranks nothing
    assert main(["--sampler", "configs/fhs.yaml", "--law", "chain", "--target-tv", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --target-tv must lie in (0, 1), got 1.5"


def test_ranking_law_prints_the_dtype_note(capsys) -> None:
    assert main(README + ["--samples", "1500"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("dtype-sensitive: in 3 of the 30 evidence states") and out[-1].startswith("CONFORMS")


@pytest.mark.slow
def test_at_n_80000_correct_code_conforms_and_broken_code_differs(capsys) -> None:
    """About 110 CPU s: the issue's five runs at N = 80000, each verdict stating the TV it detects."""
    n = ["--samples", "80000"]
    runs = [(README + n, 0),
            (README[:1] + [EXT % ("external_samplers:plain_generate", "")] + README[2:] + n, 0),
            (README[:2] + ["--chain", "generic", "--seq-len", "4", "--against",
                           "{class_path: dllm_lit.samplers.LLaDA, init_args: {steps: 3, temperature: 1.0, prompt_mode: pi}}"] + n, 0),
            (README[:1] + [EXT % ("examples.llada_generate:generate", ", kwargs: {block_length: 3, temperature: 1.0}, "
                                  "model_options: {logits_dtype: float32}")] + README[2:] + n, 1),
            (README[:1] + [EXT % ("external_samplers:generate_k_off_by_one", ", kwargs: {block_length: 3, "
                                  "temperature: 1.0}")] + README[2:] + n, 1)]
    for argv, code in runs:
        assert main(argv) == code, argv
        last = capsys.readouterr().out.strip().splitlines()[-1]
        assert re.search(r"at N = 80000 this test detects.* TV >= 0\.01", last), last
