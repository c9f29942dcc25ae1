"""ParallelBench-style task worlds (dllm_lit/sources/list_tasks.py, dllm_lit/markov/finite_support.py): the law and
the posterior under masking against brute-force enumeration, the closed-form parallel accuracy against the exact
law of paper MDLM (dynamic programming) and against measurement, bad parameters refused in one line."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch

from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.exact import all_sequences, mdlm_paper_law
from dllm_lit.markov.chain import ChainError
from dllm_lit.metrics.task_accuracy import clopper_pearson
from dllm_lit.samplers import MDLMPaper
from dllm_lit.samplers.selection import transfer_schedule
from dllm_lit.sources import ListTask
from dllm_lit.sources.list_tasks import (answer_correct, parallel_accuracy, prompt_length, task_vocab_size,
                                         task_world)

# (task, items, length): tiny enough for V^T enumeration
TINY = [("copy", 3, 2), ("replace", 4, 2), ("shuffle", 3, 3), ("domino", 2, 3)]


def _prompt_ok(task: str, prompt: tuple[int, ...], items: int) -> bool:
    return task == "domino" or len(set(prompt)) == len(prompt)


def brute_force_law(task: str, items: int, length: int, prompt: tuple[int, ...] | None) -> torch.Tensor:
    """p(x) over every sequence of the world, from the task's scoring rule alone: uniform over the valid prompts,
    then uniform over the answers the rule accepts."""
    V, P = task_vocab_size(task, items), prompt_length(task, length)
    T = length if prompt is not None else P + length
    seqs = list(itertools.product(range(V), repeat=T))
    prompts = [prompt] if prompt is not None else [p for p in itertools.product(range(V), repeat=P)
                                                   if _prompt_ok(task, p, items)]
    weight = {}
    for p in prompts:
        good = [a for a in itertools.product(range(V), repeat=length) if answer_correct(task, p, a, items)]
        for a in good:
            weight[(p if prompt is None else ()) + a] = Fraction(1, len(prompts) * len(good))
    return torch.tensor([float(weight.get(s, 0)) for s in seqs], dtype=torch.float64)


@pytest.mark.parametrize("task,items,length", TINY)
@pytest.mark.parametrize("conditional", [True, False])
def test_law_and_posterior_equal_brute_force(task, items, length, conditional):
    world = task_world(task, items, length, conditional=conditional)
    prompt = world.prompt
    p = brute_force_law(task, items, length, prompt)
    V, T = world.vocab_size, world.horizon
    x = all_sequences(V, T)
    assert torch.allclose(world.log_prob(x).exp(), p, atol=1e-12, rtol=0)
    assert torch.equal(world.in_support(x), p > 0)  # correctness decided exactly
    # posterior at every position under random masks (some with impossible evidence excluded): enumeration
    g = torch.Generator().manual_seed(0)
    valid = x[p > 0]
    for _ in range(12):
        row = valid[torch.randint(valid.shape[0], (1,), generator=g)]
        masked = torch.rand(1, T, generator=g) < 0.6
        z = torch.where(masked, torch.full_like(row, world.mask_id), row)
        agree = ((x == z) | (z == world.mask_id)).all(1)
        w = p * agree
        expect = torch.stack([torch.zeros(V, dtype=torch.float64).index_add_(0, x[:, t], w) for t in range(T)])
        expect /= w.sum()
        got = hmm_posterior(world, z)[0]
        assert torch.allclose(got, expect, atol=1e-12, rtol=0)


@pytest.mark.parametrize("task,items,length,steps", [
    ("copy", 3, 3, 1), ("replace", 4, 3, 1), ("replace", 4, 3, 2), ("shuffle", 4, 3, 1), ("shuffle", 4, 3, 2),
    ("shuffle", 4, 4, 2), ("domino", 2, 3, 1), ("domino", 2, 4, 2), ("domino", 2, 4, 3), ("replace", 5, 4, 3)])
def test_closed_form_accuracy_equals_the_exact_law_of_paper_mdlm(task, items, length, steps):
    world = task_world(task, items, length)
    law = mdlm_paper_law(world, length, steps)  # DP over partially masked states, exact posteriors
    exact = float(law[world.in_support(all_sequences(world.vocab_size, length))].sum())
    closed = parallel_accuracy(task, transfer_schedule(length, steps), items)
    assert abs(exact - float(closed)) < 1e-12


def test_closed_forms_at_known_values():
    assert parallel_accuracy("shuffle", [3]) == Fraction(6, 27)  # n! / n^n
    assert parallel_accuracy("shuffle", [1, 1, 1]) == 1
    assert parallel_accuracy("replace", [4]) == 4 * Fraction(1, 4) * Fraction(3, 4) ** 3  # exactly one w
    assert parallel_accuracy("domino", [3], 5) == Fraction(1, 25)  # two shared digits, both drawn twice
    assert parallel_accuracy("copy", [5]) == 1
    assert parallel_accuracy("shuffle", [2, 0, 2]) == parallel_accuracy("shuffle", [2, 2])  # empty rounds


@pytest.mark.slow
@pytest.mark.parametrize("task,items,length", [("replace", 8, 6), ("shuffle", 8, 6), ("domino", 4, 6)])
def test_measured_paper_mdlm_accuracy_within_the_interval_of_the_closed_form(task, items, length):
    world = task_world(task, items, length, prompt_seed=3)
    N = 4000
    for steps in (2, 3, 6):  # 3, 2 and 1 tokens per step
        sampler = MDLMPaper(steps=steps).connect(world)
        x = sampler.generate(torch.arange(N), length, steps, seed=11)
        ok = int(world.in_support(x).sum())
        low, high = clopper_pearson(ok, N, 0.99)
        closed = float(parallel_accuracy(task, transfer_schedule(length, steps), items))
        assert low <= closed <= high, (task, steps, ok / N, closed)


def test_paper_mdlm_run_reports_task_accuracy(tmp_path):
    from dllm_lit.data import MarkovDataModule
    from dllm_lit.engine import predict
    from dllm_lit.results.writer import ResultsWriter

    dm = MarkovDataModule(source=ListTask("shuffle", 5, 3), num_sequences=64, seq_len=3, seed=1)
    writer = ResultsWriter(output_dir=str(tmp_path), figures=False)
    predict(MDLMPaper(steps=[1, 3]), dm, writer)
    import json

    rows = {(r["sampler"], r["steps"]): r for r in json.loads((tmp_path / "metrics.json").read_text())["rows"]}
    assert rows[("ar", None)]["task_accuracy"] == 1.0 and rows[("mdlm_paper", 3)]["task_accuracy"] == 1.0
    assert 0 < rows[("mdlm_paper", 1)]["task_accuracy"] < 1
    low, high = rows[("mdlm_paper", 1)]["task_accuracy_ci"]
    assert low < rows[("mdlm_paper", 1)]["task_accuracy"] < high


@pytest.mark.parametrize("kwargs,field", [
    (dict(task="replace", items=4, length=4), "items"),        # the new word must be a fifth item
    (dict(task="shuffle", items=3, length=4), "items"),        # 4 distinct items out of 3
    (dict(task="sort", items=5, length=3), "task"),
    (dict(task="copy", items=1, length=1), "items"),
    (dict(task="copy", items=4, length=0), "length"),
    (dict(task="shuffle", items=12, length=10), "length"),     # 10! answers: oversized
    (dict(task="copy", items=5, length=3, prompt=[1, 1, 2]), "prompt"),
    (dict(task="copy", items=5, length=3, prompt=[1, 2]), "prompt"),
    (dict(task="copy", items=5, length=3, prompt=[1, 2, 7]), "prompt"),
    (dict(task="copy", items=5, length=3, conditional="yes"), "conditional"),
])
def test_impossible_parameters_refused_in_one_line(kwargs, field):
    with pytest.raises(ValueError) as err:
        ListTask(**kwargs)
    msg = str(err.value)
    assert "\n" not in msg and field in msg


def test_oversized_closed_form_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        parallel_accuracy("domino", [2] * 40, 3)
    assert "\n" not in str(err.value) and "counts" in str(err.value)


def test_wrong_length_refused_before_any_work():
    from dllm_lit.data import MarkovDataModule
    from dllm_lit.engine import connect

    dm = MarkovDataModule(source=ListTask("copy", 4, 3), num_sequences=8, seq_len=5)
    with pytest.raises(ChainError, match="data.seq_len must equal the world's horizon 3"):
        connect(MDLMPaper(steps=2), dm)
    world = task_world("copy", 4, 3)
    with pytest.raises(ChainError, match="horizon"):
        world.sample(2, 4, seed=0)
