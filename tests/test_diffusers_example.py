"""diffusers' LLaDA2Pipeline + BlockRefinementScheduler, unchanged, on the oracle model (needs the diffusers extra)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from dllm_lit.exact.conformance import goodness_of_fit  # noqa: E402
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


def loo_rows_everywhere(chain, T: int) -> torch.Tensor:
    """p(x_i | z_{-i}) of every position of every partially masked z in {0..V}^T: [V+1)^T * T, V] float64."""
    from dllm_lit.denoisers import OracleDenoiser

    V = chain.vocab_size
    den = OracleDenoiser(chain)
    z = torch.cartesian_prod(*[torch.arange(V + 1)] * T)
    rows = []
    for i in range(T):
        zi = z.clone()
        zi[:, i] = V
        rows.append(den.probs_at(zi, torch.arange(len(zi)), torch.full((len(zi),), i)).double())
    return torch.cat(rows)


@pytest.mark.slow
@pytest.mark.parametrize("editing, max_post", [(0.42, 3), (None, 0)])
def test_llada21_follows_the_pipeline_loop(editing, max_post) -> None:
    """LLaDA21's tokens and NFE law equal diffusers' LLaDA2Pipeline loop run on the oracle model (leave-one-out
    logits at revealed positions), one sequence per pipeline call: early-filled blocks, edits, the post-mask cap
    (max_post_steps + 1 calls), and with editing off the one extra call.  Two-sample chi-square tests at N = 4000
    a side; the chain is tie-free and every confidence lies far from the thresholds, so the pipeline's float32
    comparisons decide as the project's float64 ones."""
    from dllm_lit.exact.conformance import two_sample
    from dllm_lit.samplers import LLaDA21

    chain = named_chain("generic")
    T, steps, thr, n = 4, 4, 0.28, 4000
    rows = loo_rows_everywhere(chain, T)
    top = rows.sort(-1).values
    assert float((top[:, 1:] - top[:, :-1]).min()) > 1e-3  # no ties within a row
    for t in (thr, editing or thr):
        assert float((rows - t).abs().min()) > 1e-3  # no confidence within 1e-3 of a threshold
    kw = {"block_length": T, "temperature": 1.0, "threshold": thr, "editing_threshold": editing,
          "max_post_steps": max_post, "eos_early_stop": False}
    ext = ExternalSampler(steps=steps, scheduler_kwargs={"block_length": T}, kwargs=kw,
                          model_options={"revealed": "leave_one_out"}, **PIPE).connect(chain)
    runs = [ext.generate_with_nfe(torch.tensor([i]), T, steps, 0) for i in range(n)]
    x_up, nfe_up = torch.cat([r[0] for r in runs]), torch.cat([r[1] for r in runs]).long()
    ours = LLaDA21(block_length=T, threshold=thr, editing_threshold=editing, max_post_steps=max_post).connect(chain)
    x, nfe = ours.generate_with_nfe(torch.arange(n), T, steps, 1)
    nfe = nfe.long()
    top_nfe = int(max(nfe.max(), nfe_up.max())) + 1
    assert two_sample(x, x_up, chain.vocab_size).p_value > 0.01
    assert two_sample(nfe[:, None], nfe_up[:, None], top_nfe).p_value > 0.01
    assert int(nfe_up.max()) <= steps + max_post + 1 and int(nfe.max()) <= steps + max_post + 1
