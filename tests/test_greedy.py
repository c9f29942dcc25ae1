"""Exact greedy scores: log p of each output given its prompt, the exact mode and k best (every world kind, against
enumeration), regret 0 for an exact mode decoder and positive for a sampling one, through the results registry."""
from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from tiny_worlds import V, WORLDS, TinyWorldSource, brute_log_probs
from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.markov.world_api import exact_world
from dllm_lit.metrics.functional.greedy import greedy_scores, prefix_canvases
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers.base import Sampler

pytestmark = pytest.mark.usefixtures("single_thread")
T = 5


@pytest.mark.parametrize("kind", WORLDS)
def test_scores_equal_enumeration(kind) -> None:
    world = WORLDS[kind]()
    x_all, lp_all = brute_log_probs(world, T)
    x = exact_world(world).sample(30, T, seed=4)
    for P in (0, 2):
        s = greedy_scores(world, x, prefix_canvases(x, P, V) if P else None, rank_limit=V ** (T - P))
        for n in range(x.shape[0]):
            agree = (x_all[:, :P] == x[n, :P]).all(1)
            lp, evidence = lp_all[agree], torch.logsumexp(lp_all[agree], 0)
            own = float(world.log_prob(x[n:n + 1])[0])
            assert abs(float(s.log_p[n]) - (own - float(evidence))) <= 1e-10
            assert abs(float(s.mode_log_p[n]) - float(lp.max() - evidence)) <= 1e-10
            assert int(s.rank[n]) == 1 + int((lp > own + 1e-9).sum())
            assert float(s.regret[n]) == pytest.approx(float(lp.max() - own) / (T - P), abs=1e-12)
        assert bool((s.regret >= 0).all()) and int(s.free[0]) == T - P


def test_ranks_beyond_the_list_and_ties() -> None:
    world = WORLDS["chain"]()
    x = exact_world(world).sample(50, T, seed=2)
    s = greedy_scores(world, x, rank_limit=3)
    x_all, lp_all = brute_log_probs(world, T)
    true_rank = torch.tensor([1 + int((lp_all > float(world.log_prob(x[n:n + 1])[0]) + 1e-9).sum()) for n in range(50)])
    assert torch.equal(s.rank, torch.where(true_rank <= 3, true_rank, 4))
    # a sequence tied with the mode (permuted transitions of a first-order chain) is a mode: regret exactly 0
    mode, _ = exact_world(world).k_best(torch.full((T,), V), 1)
    assert float(greedy_scores(world, mode).regret[0]) == 0.0


class ModeDecoder(Sampler):
    """Outputs the exact mode of the world: an exact mode decoder (its scores must read regret 0)."""

    sampler_name = "mode"

    def generate(self, indices, seq_len, steps, seed):
        mode, _ = exact_world(self.chain).k_best(torch.full((seq_len,), self.mask_id), 1)
        return mode.expand(indices.numel(), -1).clone()


@pytest.mark.parametrize("kind, length", [("chain", T), ("switching", 17)])  # HMM worlds: the dependence profile needs T > 16
def test_registry_regret_zero_for_the_mode_decoder_positive_for_sampling(kind, length, tmp_path) -> None:
    dm = MarkovDataModule(source=TinyWorldSource(kind), num_sequences=64, seq_len=length, chunk_size=64, seed=3)
    writer = ResultsWriter(output_dir=str(tmp_path), bootstrap_resamples=50, figures=False, num_text_examples=0,
                           metric_options={"greedy": True})
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    predict(ModeDecoder(steps=[1]), dm, writer, trainer=trainer)
    rows = {r["sampler"]: r for r in json.loads((tmp_path / "metrics.json").read_text())["rows"]}
    mode, ar = rows["mode"], rows["ar"]
    assert mode["greedy_regret"] == 0.0 and mode["greedy_mode_frac"] == 1.0 and mode["greedy_rank"] == 1.0
    assert mode["greedy_nll"] == pytest.approx(mode["greedy_mode_nll"], abs=1e-12)
    assert ar["greedy_regret"] > 0 and ar["greedy_regret_ci"][0] > 0 and ar["greedy_mode_frac"] < 0.5
    assert ar["greedy_rank"] > 1


def test_bad_greedy_options_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="greedy_rank_limit must be") as err:
        ResultsWriter(metric_options={"greedy": True, "greedy_rank_limit": 0})
    assert "\n" not in str(err.value)
