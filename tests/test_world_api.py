"""The exact-world interface against enumeration on tiny worlds of every kind: the evidence's probability,
conditional sampling (goodness of fit), the exact k best sequences (best-first max-product search), the exact
conditional pair laws (forward-backward), the derived methods of ExactWorld, and one-line refusals of bad canvases."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from tiny_worlds import V, WORLDS, brute_log_probs
from dllm_lit.markov.max_product import SearchBudgetError
from dllm_lit.markov.world_api import ExactWorld, check_canvas, conditional_log_prob, exact_world

pytestmark = pytest.mark.usefixtures("single_thread")
M = V
T = 5
TOL = 1e-10
CANVASES = [[M] * T, [0, 2, M, M, M], [M, 1, M, 0, M], [2, M, M, M, 1]]


def agrees(x: torch.Tensor, z: list[int]) -> torch.Tensor:
    z = torch.tensor(z)
    return ((z == M) | (x == z)).all(1)


@pytest.mark.parametrize("kind", WORLDS)
def test_evidence_and_conditional_log_prob_equal_enumeration(kind) -> None:
    world = WORLDS[kind]()
    x, lp = brute_log_probs(world, T)
    w = exact_world(world)
    z = torch.tensor(CANVASES)
    got = w.log_evidence(z)
    for n, canvas in enumerate(CANVASES):
        keep = agrees(x, canvas)
        want = torch.logsumexp(lp[keep], 0)
        assert abs(float(got[n] - want)) <= TOL
        cond = conditional_log_prob(world, x[keep], z[n].expand(int(keep.sum()), -1))
        assert (cond - (lp[keep] - want)).abs().max() <= TOL


@pytest.mark.parametrize("kind", WORLDS)
def test_k_best_equals_brute_force(kind) -> None:
    world = WORLDS[kind]()
    x, lp = brute_log_probs(world, T)
    for canvas in CANVASES:
        keep = agrees(x, canvas)
        order = torch.sort(-lp[keep], stable=True).indices
        want, want_x = lp[keep][order], x[keep][order]
        seqs, lps = exact_world(world).k_best(torch.tensor(canvas), 6)
        assert (lps - want[:6]).abs().max() <= TOL
        # a sequence is determined where its probability is tied with no other (a first-order chain has ties:
        # permuted transitions); tied ones are a set of equal probabilities
        for j in range(6):
            tied = (want - want[j]).abs() <= 1e-12
            assert bool(((want_x[tied] == seqs[j]).all(1)).any())


def test_mode_of_a_hidden_state_hmm_is_not_the_viterbi_path_in_general() -> None:
    """The search sums over hidden paths: its mode is the token sequence of largest probability (checked
    against enumeration above for every world), whatever the best state path emits."""
    world = WORLDS["hmm"]()
    seqs, lps = exact_world(world).k_best(torch.full((T,), M), 1)
    x, lp = brute_log_probs(world, T)
    assert torch.equal(seqs[0], x[lp.argmax()])


@pytest.mark.parametrize("kind", WORLDS)
def test_sample_given_has_the_exact_conditional_law(kind) -> None:
    world = WORLDS[kind]()
    x, lp = brute_log_probs(world, T)
    canvas = [M, 1, M, M, 0]
    keep = agrees(x, canvas).double()
    law = (lp.exp() * keep) / (lp.exp() * keep).sum()
    z = torch.tensor([canvas] * 4000)
    s = exact_world(world).sample_given(z, seed=3, indices=torch.arange(4000))
    assert bool((s[:, [1, 4]] == torch.tensor([1, 0])).all())
    assert chi_square_pvalue(sequence_counts(s, V), law) > 1e-3
    again = exact_world(world).sample_given(z[5:9], seed=3, indices=torch.arange(5, 9))
    assert torch.equal(again, s[5:9])  # depends only on (seed, index)


class Derived(ExactWorld):
    """An ExactWorld with only the three required methods (what a task world must give)."""

    def __init__(self, world) -> None:
        self.inner = exact_world(world)
        self.vocab_size = self.inner.vocab_size

    def log_prob(self, x):
        return self.inner.log_prob(x)

    def sample(self, num_sequences, length, *, seed, start_index=0):
        return self.inner.sample(num_sequences, length, seed=seed, start_index=start_index)

    def posterior(self, z):
        return self.inner.posterior(z)


def test_derived_methods_match_the_hmm_view() -> None:
    world = WORLDS["order2"]()
    view, derived = exact_world(world), Derived(world)
    z = torch.tensor(CANVASES)
    assert (derived.log_evidence(z) - view.log_evidence(z)).abs().max() <= TOL
    for canvas in CANVASES[1:]:
        a, la = derived.k_best(torch.tensor(canvas), 4)
        b, lb = view.k_best(torch.tensor(canvas), 4)
        assert torch.equal(a, b) and (la - lb).abs().max() <= TOL
    x, lp = brute_log_probs(world, T)
    canvas = [M, M, 2, M, M]
    keep = agrees(x, canvas).double()
    law = (lp.exp() * keep) / (lp.exp() * keep).sum()
    s = derived.sample_given(torch.tensor([canvas] * 3000), seed=1, indices=torch.arange(3000))
    assert chi_square_pvalue(sequence_counts(s, V), law) > 1e-3


@pytest.mark.parametrize("kind", WORLDS)
def test_pair_rows_equal_enumeration(kind) -> None:
    """p(x_t = a, x_{t+1} = b | z) at every adjacent free pair of every canvas, for all a, from the HMM view
    (forward-backward) and from ExactWorld's derivation (posterior with a written at t), against enumeration."""
    world = WORLDS[kind]()
    x, lp = brute_log_probs(world, T)
    z = torch.tensor(CANVASES)
    for w in (exact_world(world), Derived(world)):
        for n, canvas in enumerate(CANVASES):
            keep = agrees(x, canvas).double()
            p = lp.exp() * keep / (lp.exp() * keep).sum()
            for t in range(T - 1):
                if canvas[t] == M and canvas[t + 1] == M:
                    want = torch.zeros(V, V, dtype=torch.float64).index_put_((x[:, t], x[:, t + 1]), p, accumulate=True)
                    got = w.pair_rows(z, torch.full((V,), n), torch.full((V,), t), torch.arange(V))
                    assert (got - want).abs().max() <= TOL, (type(w).__name__, n, t)


@pytest.mark.parametrize("t, a, message", [
    (0, 0, "two adjacent free positions"), (4, 0, r"0 <= t < T - 1 = 4"), (2, 3, r"tokens in \[0, 3\)")])
def test_bad_pair_queries_are_refused_in_one_line(t, a, message) -> None:
    z = torch.tensor([[0, M, M, M, M]])
    for w in (exact_world(WORLDS["chain"]()), Derived(WORLDS["chain"]())):
        with pytest.raises(ValueError, match=message) as err:
            w.pair_rows(z, torch.tensor([0]), torch.tensor([t]), torch.tensor([a]))
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("canvas, message", [
    ([0, M, M, M, M, M, M], "has length 7; the sequence length T is 5"),
    ([0, 7, M, M, M], "holds token id 7, outside the vocabulary 0..2"),
    ([0, 1, 2, 0, 1], "reveals every position: nothing to fill"),
    ([0.0, 3.0, 3.0, 3.0, 3.0], "must hold integer token ids"),
])
def test_bad_canvases_are_refused_in_one_line(canvas, message) -> None:
    with pytest.raises(ValueError, match=message) as err:
        check_canvas(torch.tensor(canvas), V, seq_len=T)
    assert "\n" not in str(err.value)


def test_search_budget_is_refused_in_one_line() -> None:
    with pytest.raises(SearchBudgetError, match="needed more than 3 nodes") as err:
        exact_world(WORLDS["hmm"]()).k_best(torch.full((T,), M), 5, max_nodes=3)
    assert "\n" not in str(err.value)
