"""The exact world's per-sequence answers do not depend on the batch: log p(x), the evidence (plain and tilted), the
forward / backward messages, the pair laws, the conditional samples and the greedy scores of each sequence are the
same float64 bits (torch.equal) alone, in any chunk and in any order; the max-product search breaks exact ties by
its declared rule (lexicographic prefixes) whatever the number of tied tokens.  On 62fb7a2 (BLAS gemv / gemm, whose
rounding of a row depends on the block it sits in) the log-probability, message and greedy-score tests failed in
both worlds; the draws and the tie order there happened to agree (an ulp flips a draw only at a cdf boundary, and the
search's log-space sums absorbed it)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import HMMWorld
from dllm_lit.markov import hmm_conditional as hc
from dllm_lit.markov.max_product import k_best
from dllm_lit.metrics.functional.greedy import greedy_scores
from dllm_lit.sources import KthOrderChars
from dllm_lit.sources.hmm_synthetic import synthetic_hmm

pytestmark = pytest.mark.usefixtures("single_thread")

WORLDS = {"hmm": lambda: synthetic_hmm(40, 27, stay=0.5, emission_support=3, seed=0),  # dense, S = 40
          "order2": lambda: KthOrderChars(2).build()}  # context, S = 729, V = 27
#: sub-batch sizes (BLAS takes gemv at 1 and gemm blockings that change with the size)
SIZES = (1, 2, 3, 5, 8, 13)
N, T = 26, 10


def canvases(world: HMMWorld, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, z): N exact samples and canvases revealing about half of their tokens."""
    x = world.sample(N, T, seed=seed)
    hide = torch.rand(N, T, generator=torch.Generator().manual_seed(seed)) < 0.5
    return x, torch.where(hide, torch.full_like(x, world.mask_id), x)


def same_rows(fn, *args: torch.Tensor) -> None:
    """fn's rows on the whole batch == on chunks of every size in SIZES == on a permuted batch, bit for bit."""
    full = fn(*args)
    for size in SIZES:
        parts = [fn(*(a[i:i + size] for a in args)) for i in range(0, args[0].shape[0], size)]
        assert torch.equal(torch.cat(parts), full), size
    perm = torch.randperm(args[0].shape[0], generator=torch.Generator().manual_seed(1))
    assert torch.equal(fn(*(a[perm] for a in args)), full[perm])


@pytest.mark.parametrize("kind", sorted(WORLDS))
def test_log_probabilities_and_evidence_do_not_depend_on_the_batch(kind) -> None:
    world = WORLDS[kind]()
    x, z = canvases(world, seed=2)
    w = torch.rand(N, T, world.vocab_size, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    same_rows(world.log_prob, x)
    same_rows(lambda c: hc.log_evidence(world, c), z)
    same_rows(lambda c, g: hc.log_evidence(world, c, g), z, w)


@pytest.mark.parametrize("kind", sorted(WORLDS))
def test_messages_and_pair_laws_do_not_depend_on_the_batch(kind) -> None:
    world = WORLDS[kind]()
    z = canvases(world, seed=4)[1]
    E = hc.emission_table(world)
    same_rows(lambda c: hc._left_messages(world, c, E), z)
    same_rows(lambda c: hc._right_messages(world, c, E), z)
    z[:, 3:5] = world.mask_id  # a free pair at (3, 4) in every canvas, queried at token 0 / 1 alternately
    a = torch.arange(N) % 2

    def pairs(c: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
        return hc.pair_rows(world, c, torch.arange(c.shape[0]), torch.full((c.shape[0],), 3), tok)

    same_rows(pairs, z, a)


@pytest.mark.parametrize("kind", sorted(WORLDS))
def test_conditional_samples_do_not_depend_on_the_batch(kind, monkeypatch) -> None:
    """The draws and the canvases' own chunks of rows (here 3 rows) change nothing; each draw agrees with its canvas."""
    world = WORLDS[kind]()
    z = canvases(world, seed=5)[1]
    idx = torch.arange(100, 100 + N)
    full = hc.sample_given(world, z, 7, idx)
    assert torch.equal(torch.where(z < world.mask_id, z, full), full)
    same_rows(lambda c, i: hc.sample_given(world, c, 7, i), z, idx)
    monkeypatch.setattr(hc, "_MESSAGE_BYTES", 8 * T * world.num_states * 3)
    assert torch.equal(hc.sample_given(world, z, 7, idx), full)


@pytest.mark.parametrize("kind", sorted(WORLDS))
def test_greedy_scores_do_not_depend_on_the_batch(kind) -> None:
    """Each output's log p(x | c), mode and rank (one search per prompt, shared through ``searches``)."""
    world = WORLDS[kind]()
    x = world.sample(N, 6, seed=8)
    c = x.clone()
    c[:, 2:] = world.mask_id
    searches: dict = {}

    def scores(xs: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
        s = greedy_scores(world, xs, cs, rank_limit=3, searches=searches)
        return torch.stack([s.log_p, s.mode_log_p, s.rank.to(torch.float64), s.regret], 1)

    same_rows(scores, x, c)


def duplicated_world(copies: int) -> HMMWorld:
    """A 3-state HMM over 2 symbols, each symbol emitted as any of ``copies`` tokens (token v * copies + j, j <
    copies) with equal probability: the sequences that differ only in the copies j tie exactly."""
    A = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.25, 0.25, 0.5]], dtype=torch.float64)
    B0 = torch.tensor([[0.7, 0.3], [0.2, 0.8], [0.55, 0.45]], dtype=torch.float64)
    return HMMWorld(emission=B0.repeat_interleave(copies, 1) / copies, transition=A)


@pytest.mark.parametrize("copies", [1, 2, 3, 5, 7, 8])
def test_max_product_ties_go_to_the_first_prefix_for_every_number_of_tied_tokens(copies) -> None:
    """The mode of the token law given a canvas is the base world's mode written with copy 0 everywhere (the
    lexicographically first of the tied sequences), and the next best are its tied copies in lexicographic order,
    for every number of tied rows in the search's products."""
    base = duplicated_world(1)
    z0 = torch.tensor([2, 2, 1, 2, 2, 0, 2])  # MASK = 2 in the base world
    mode0 = k_best(base, z0, 1)[0][0]
    world = duplicated_world(copies)
    V = world.vocab_size
    z = torch.where(z0 == 2, torch.full_like(z0, V), z0 * copies)
    seqs, lps = k_best(world, z, 3)
    assert torch.equal(seqs[0], mode0 * copies)
    if copies > 1:  # then the tied copies in lexicographic order: the last free position (6) moved to copy 1, 2, ...
        assert torch.equal(lps, lps[:1].expand(3))
        second, third = seqs[0].clone(), seqs[0].clone()
        second[6] += 1
        third[6 if copies > 2 else 4] += 1
        third[6] += 1 if copies > 2 else 0
        assert torch.equal(seqs[1:], torch.stack([second, third]))
