"""diffusers' LLaDA2Pipeline + BlockRefinementScheduler, unchanged, on the oracle model (needs the diffusers extra)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from dllm_lit.conformance import goodness_of_fit  # noqa: E402
from dllm_lit.exact import ranked_choice, score_select_law, tempered_options  # noqa: E402
from dllm_lit.exact.rules import _prompt_init  # noqa: E402
from dllm_lit.experiments.conform import named_chain  # noqa: E402
from dllm_lit.samplers.external import ExternalSampler  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")
PIPE = {"pipeline": "diffusers:LLaDA2Pipeline", "scheduler": "diffusers:BlockRefinementScheduler"}


def test_the_documented_script_runs_offline(monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from examples.diffusers_llada2 import main

    texts = main(["--gen-length", "32", "--num-sequences", "2"])
    assert len(texts) == 2 and all(len(t) == 32 for t in texts)
    assert capsys.readouterr().out.startswith("in the beginning|")


def pipeline_law(chain, steps: int):
    """The pipeline with threshold 1 (never exceeded: top-k commits only) on one block of 4 positions holding the
    prompt token: the scheduler splits the block's 4 positions over the steps ([2, 1, 1] for 3), and the top-k
    confident masked positions commit - LLaDA's rule with the block's counts."""
    counts = [4 // steps + (1 if i < 4 % steps else 0) for i in range(steps)]
    return score_select_law(chain, 4, [(1, 4)], lambda g: tempered_options(g, 1.0), lambda i, v, g, lo: float(g[i, v]),
                            lambda j, masked, scores: ranked_choice(masked, scores, counts[j], "lowest"),
                            schedule=[counts], init=_prompt_init(chain, 4, 1))


def draw(ext, n: int, steps: int) -> torch.Tensor:
    return torch.cat([ext.generate(torch.arange(i, i + 2000), 4, steps, 0) for i in range(0, n, 2000)])


def test_pipeline_follows_its_exact_law() -> None:
    chain = named_chain("generic")
    ext = ExternalSampler(steps=3, prompt_length=1, scheduler_kwargs={"block_length": 4},
                          kwargs={"block_length": 4, "temperature": 1.0, "threshold": 1.0, "editing_threshold": None,
                                  "eos_early_stop": False}, **PIPE).connect(chain)
    assert goodness_of_fit(draw(ext, 4000, 3), pipeline_law(chain, 3)).p_value > 0.01


def test_editing_fires_only_with_leave_one_out() -> None:
    """Same seeds: with SUBS logits (a point mass on a revealed token) editing never fires, so the samples equal
    the run without editing draw for draw; with leave-one-out logits edits happen and the samples change."""
    chain = named_chain("tiny")
    base = {"block_length": 8, "temperature": 1.0, "threshold": 0.5, "eos_early_stop": False}

    def run(editing, revealed):
        ext = ExternalSampler(steps=4, kwargs=base | {"editing_threshold": editing},
                              model_options={"revealed": revealed}, **PIPE).connect(chain)
        return ext.generate_with_nfe(torch.arange(64), 8, 4, 0)

    plain, _ = run(None, "self")
    assert torch.equal(run(0.5, "self")[0], plain)
    edited, nfe = run(0.5, "leave_one_out")
    assert not torch.equal(edited, plain)
    assert bool((edited >= 0).all() and (edited < 3).all())
