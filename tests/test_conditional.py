"""Prompted runs against the exact conditional law: exact samplers (AR from the prompt, the paper's MDLM at steps =
G, ASSD) read zero on prefix and infilling prompts in chain, order-2 and HMM worlds; the conditional bracket holds
the exact per-prompt KL on a tiny world (enumeration of the sampler's exact law); bad prompts are refused in one
line."""
from __future__ import annotations

import pytest
import torch

from tiny_worlds import V, WORLDS
from dllm_lit.experiments.prompted import draw_prompts, law_is_exact, sample_prompted
from dllm_lit.exact import all_sequences, mdlm_paper_law
from dllm_lit.markov.world_api import ConditionedWorld
from dllm_lit.metrics.functional.conditional import conditional_values
from dllm_lit.samplers import ASSD, AR, LLaDA, MDLMPaper

pytestmark = pytest.mark.usefixtures("single_thread")
T = 6


def evaluate(world, sampler, canvases, R, steps, seed=1, reference=None, confidence=0.95):
    if sampler is not None:
        sampler.connect(world)
    run = sample_prompted(sampler, world, canvases, R, steps, seed)
    ref = reference.stats["log_p"] if reference is not None else None
    return run, conditional_values(world, run.samples, run.prompt, run.canvases, run.stats["log_q"],
                                   run.stats["log_p"], ref, confidence,
                                   reference_samples=None if reference is None else reference.samples,
                                   exact=bool((run.stats["exact_law"] > 0).all()))


@pytest.mark.parametrize("kind", ["chain", "order2", "hmm"])
@pytest.mark.parametrize("prompt", ["prefix", "infill"])
def test_exact_samplers_read_zero(kind, prompt) -> None:
    world = WORLDS[kind]()
    canvases = draw_prompts(world, 8, T, seed=0, **({"prefix": 2} if prompt == "prefix" else {"reveal": [0, 3]}))
    G = T - 2
    ref, ref_vals = evaluate(world, None, canvases, 4, None)
    revealed = canvases[ref.prompt] < V
    assert torch.equal(ref.samples[revealed], canvases[ref.prompt][revealed])
    assert ref_vals["cond_seq_kl_upper"] == (0.0, (0.0, 0.0))
    for sampler, steps in ((AR(), None), (MDLMPaper(steps=G), G), (ASSD(steps=2), 2)):
        run, vals = evaluate(world, sampler, canvases, 4, steps, seed=3, reference=ref)
        assert torch.equal(run.samples[revealed], canvases[ref.prompt][revealed])
        # declared exact on the exact oracle: 0 exactly, though log q is summed from the oracle's float32 rows
        # (log q - log p within 1e-6 nats per token of 0: the same law, rounded)
        assert vals["cond_seq_kl_upper"] == (0.0, (0.0, 0.0)), type(sampler).__name__
        assert bool(((run.stats["log_q"] - run.stats["log_p"]).abs() <= 1e-6 * G).all())
    run, vals = evaluate(world, MDLMPaper(steps=1), canvases, 4, 1, reference=ref)
    assert not bool(run.stats["exact_law"].any()) and vals["cond_seq_kl_upper"][0] > 0  # one parallel step


def test_declared_exactness_needs_the_worlds_exact_oracle() -> None:
    """law_is_exact: the sampler's declaration at (G, steps) and the exact oracle of this very world."""
    world, other = WORLDS["order2"](), WORLDS["order2"](seed=99)
    sampler = MDLMPaper(steps=4).connect(world)
    assert law_is_exact(sampler, sampler.denoiser, world, 4, 4)
    assert not law_is_exact(sampler, sampler.denoiser, world, 4, 2)  # two tokens per step
    assert not law_is_exact(sampler, sampler.denoiser, other, 4, 4)  # another world's oracle
    assert not law_is_exact(LLaDA(steps=4, temperature=0.5).connect(world), sampler.denoiser, world, 4, 4)
    assert law_is_exact(AR(), None, world, 4, None)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["chain", "order2", "hmm"])
def test_exact_samplers_read_zero_excess_nll(kind) -> None:
    """The NLL excess over exact continuations (paired by index) of the exact samplers: its 99% interval over 24
    prompts contains 0 on prefix and infilling prompts."""
    world = WORLDS[kind]()
    for spec in ({"prefix": 2}, {"reveal": [0, 3]}):
        canvases = draw_prompts(world, 24, T, seed=0, **spec)
        ref, _ = evaluate(world, None, canvases, 8, None)
        for sampler, steps in ((AR(), None), (MDLMPaper(steps=T - 2), T - 2), (ASSD(steps=2), 2)):
            _, vals = evaluate(world, sampler, canvases, 8, steps, seed=3, reference=ref, confidence=0.99)
            lo, hi = vals["cond_nll_excess"][1]
            assert lo <= 0.0 <= hi, (type(sampler).__name__, spec)


@pytest.mark.slow
@pytest.mark.parametrize("make, steps, has_upper", [(lambda: MDLMPaper(steps=2), 2, True),
                                                    (lambda: LLaDA(steps=2, temperature=1.0), 2, False)])
def test_conditional_bracket_holds_the_exact_kl_on_a_tiny_world(make, steps, has_upper) -> None:
    """order-2 world, T = 4 with a one-token prefix (G = 3), 60 prompts x 20 continuations: the mean over the
    prompts of KL(q(. | c) || p(. | c)) / G, by enumeration of the sampler's exact law on each conditioned world,
    lies between the lower end's confidence bound and the upper end's interval."""
    world, T4, G = WORLDS["order2"](), 4, 3
    canvases = draw_prompts(world, 60, T4, seed=5, prefix=1)
    run, vals = evaluate(world, make(), canvases, 20, steps, seed=3)
    xs = all_sequences(V, G)
    exact = []
    for c in canvases:
        cw = ConditionedWorld(world, c)
        q = mdlm_paper_law(cw, G, steps) if has_upper else _llada_law(cw, G, steps)
        p = cw.log_prob(xs).exp()
        keep = q > 0
        exact.append(float((q[keep] * (q[keep] / p[keep]).log()).sum()) / G)
    truth = sum(exact) / len(exact)
    lower, (low_cb, _) = vals["cond_seq_kl_lower"]
    assert low_cb <= truth and lower <= truth + 0.05
    if has_upper:
        upper, (_, high) = vals["cond_seq_kl_upper"]
        assert truth <= high and upper >= lower
    else:
        assert vals["cond_seq_kl_upper"] == (None, None)


def _llada_law(world, G, steps):
    from dllm_lit.exact import llada_law

    return llada_law(world, G, steps, temperature=1.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"prefix": 6}, r"prefix \(6\) must be shorter than seq_len \(6\)"),
    ({"prefix": 9}, r"prefix \(9\) must be shorter"),
    ({"reveal": list(range(6))}, "nothing to fill"),
    ({"reveal": [0, 9]}, r"reveal positions must lie in \[0, seq_len = 6\)"),
])
def test_bad_prompts_are_refused_in_one_line(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as err:
        draw_prompts(WORLDS["chain"](), 4, T, seed=0, **kwargs)
    assert "\n" not in str(err.value)


def test_given_prompts_outside_the_vocabulary_or_too_long_are_refused() -> None:
    world = WORLDS["chain"]()
    sampler = MDLMPaper(steps=2).connect(world)
    for canvas, message in (([[0, 5, V, V]], "token id 5, outside the vocabulary"), ([[0, 1, 2, 0]], "nothing to fill")):
        with pytest.raises(ValueError, match=message):
            sample_prompted(sampler, world, torch.tensor(canvas), 2, 2, seed=0)
    with pytest.raises(ValueError, match="has a prompt of its own"):
        sample_prompted(LLaDA(steps=2, prompt_mode="pi").connect(world), world, torch.tensor([[0, V, V, V]]), 2, 2, 0)


@pytest.mark.parametrize("args, message", [
    (["--prefix", "6"], "prefix (6) must be shorter than seq_len (6)"),
    (["--prompt", "[0, 5, null, null, null, null]"], "--prompt holds token id 5, outside the vocabulary 0..2"),
    (["--prompt", "[0, 1, 2, 0, 1, 2]"], "nothing to fill"),
    (["--prompt", "[0, null, null]"], "--prompt has length 3; the sequence length T is 6"),
    (["--world", "nowhere"], "--world must be one of"),
])
def test_entry_point_refuses_bad_prompts_in_one_line(args, message, capsys) -> None:
    from dllm_lit.experiments.conditional import main

    base = ["--sampler", "configs/mdlm_paper.yaml", "--world", "order2", "--seq-len", "6", "--steps", "2"]
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_entry_point_prints_the_bracket_and_greedy_scores(capsys) -> None:
    from dllm_lit.experiments.conditional import main

    assert main(["--sampler", "configs/mdlm_paper.yaml", "--world", "hmm", "--seq-len", "5", "--prompt",
                 "[[0, null, null, 2, null], [null, 1, null, null, null]]", "--repeats", "6", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    for key in ("cond_seq_kl_upper", "cond_seq_kl_lower", "cond_nll_excess", "cond_pair_kl_excess", "greedy_regret"):
        assert out.count(key) == 2, key


def test_external_sampler_continues_prefix_prompts_with_its_exact_law() -> None:
    """The LLaDA generate() example (ExternalSampler, its config's prompt_length 1 replaced by the prompt's P = 2)
    continuing a given prefix in the order-2 world: the continuations follow LLaDA's exact law on the conditioned
    world (goodness of fit, 1500 draws; tie-free generic rows), no log q is recorded, and infilling is refused."""
    from dllm_lit.exact.conformance import goodness_of_fit
    from dllm_lit.exact import llada_law
    from dllm_lit.experiments.conform import build_sampler

    world = WORLDS["order2"]()
    ext = build_sampler("examples/llada_conform.yaml").connect(world)
    canvas = torch.tensor([[2, 0, V, V, V]])
    run = sample_prompted(ext, world, canvas, 1500, 3, seed=2)
    assert ext.prompt_length == 1 and ext.given_prompt is None  # restored after the run
    assert torch.equal(run.samples[:, :2], canvas[:, :2].expand(1500, -1))
    assert bool(run.stats["log_q"].isnan().all()) and not bool(run.stats["exact_law"].any())
    law = llada_law(ConditionedWorld(world, canvas[0]), 3, 3, temperature=1.0)
    assert goodness_of_fit(run.samples[:, 2:], law).p_value > 0.01
    with pytest.raises(ValueError, match="ExternalSampler continues prefix prompts only") as err:
        sample_prompted(ext, world, torch.tensor([[V, 0, V, V, V]]), 2, 3, seed=0)
    assert "\n" not in str(err.value)
