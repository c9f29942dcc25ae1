"""The most likely sequences of an HMM world given revealed tokens, exactly: best-first search over token prefixes.

The mode of the token law, ``max_x p(x | z)``, sums over hidden paths inside the max (for a hidden-state HMM it is
not the Viterbi path of the states).  Best-first (A*) search over prefixes with an admissible bound finds it, and
the k most likely sequences in order, exactly:

    f(s) = p(x_0..x_{t-1}, s_{t-1} = s)                       (the prefix's forward vector)
    U_t(s) = max over completions y of p(y_{t+1..T-1} | s_t = s)  <=  W_t(s)
    W_{T-1} = 1,   W_{t-1}(s) = max_{v allowed at t} sum_{s'} A(s, s') B(s', v) W_t(s')          (max-product)
    bound(prefix x_0..x_t) = sum_s p(x_0..x_t, s_t = s) W_t(s)  >=  p(x_0..x_t, best completion)

(max over y of a sum is at most the sum of the maxima).  A child's bound never exceeds its parent's, and a
complete sequence's bound is its probability, so complete sequences leave the queue in non-increasing order of
probability: the first is the mode, the first k the k best.  When the state is a function of the tokens (a
first-order chain, an order-k context chain) the bound is exact and the search walks straight to the mode
(Viterbi); for a hidden-state HMM it may branch, and ``max_nodes`` caps the work (a one-line refusal).

Equal bounds leave in lexicographic order of the prefixes (the queue's tie rule).  Every product and sum is an
index-order one (:attr:`~dllm_lit.markov.hmm.HMMWorld.products`, no BLAS), so a node's bound is a function of its
prefix alone, whatever else is computed beside it: the same terms in the same order tie exactly and the tie rule
decides.  Probabilities equal in exact arithmetic through different terms (a first-order chain's permuted
transitions) may differ in their last bits, so callers compare log-probabilities with a tolerance.  Computed in log
space with a normalised vector per node: any T.
"""
from __future__ import annotations

import heapq

import torch

from dllm_lit.markov.chain import ChainError
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.markov.hmm_conditional import emission_table
from dllm_lit.markov.products import dense_product, row_sums

__all__ = ["k_best", "max_product_bounds", "SearchBudgetError", "DEFAULT_NODE_BYTES", "DEFAULT_MAX_NODES"]

#: bytes of forward vectors the queue may hold (float64 [S] per node): the default node budget is this / (8 S) ...
DEFAULT_NODE_BYTES = 2**28
#: ... and at most this many (about a minute of CPU)
DEFAULT_MAX_NODES = 2**21


class SearchBudgetError(ChainError):
    """The search needed more nodes than allowed (one line)."""


def _allowed(z_t: int, V: int) -> torch.Tensor:
    return torch.arange(V) if z_t >= V else torch.tensor([z_t])


def max_product_bounds(world: HMMWorld, z: torch.Tensor) -> torch.Tensor:
    """log W_t(s) [T, S] (module docstring) for one canvas z [T]; -inf where no completion is possible."""
    z = z.cpu().long()
    T, S, V = z.numel(), world.num_states, world.vocab_size
    E, ops = emission_table(world), world.products
    logW = torch.zeros(T, S, dtype=torch.float64)
    w, C = torch.ones(S, dtype=torch.float64), 0.0
    for t in range(T - 1, 0, -1):
        cand = ops.left(E[_allowed(int(z[t]), V)] * w[None])  # [n_allowed, S]
        m = cand.max(0).values
        c = float(m.max())
        if c <= 0:
            logW[:t] = float("-inf")
            return logW
        w, C = m / c, C + torch.log(torch.tensor(c, dtype=torch.float64)).item()
        logW[t - 1] = C + w.log()
    return logW


@torch.no_grad()
def k_best(world: HMMWorld, z: torch.Tensor, k: int, max_nodes: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most likely sequences agreeing with canvas z [T] (MASK = V where free) and their log p(x) (joint,
    not conditional), in non-increasing order: (LongTensor [k', T], float64 [k']), k' < k when fewer sequences have
    positive probability.  ``max_nodes`` (default: :data:`DEFAULT_NODE_BYTES` / (8 S), at most :data:`DEFAULT_MAX_NODES`) caps the
    queue's pushes."""
    z = z.cpu().long().reshape(-1)
    T, S, V = z.numel(), world.num_states, world.vocab_size
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if T == 0:
        return torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, dtype=torch.float64)
    budget = int(max_nodes) if max_nodes is not None else min(DEFAULT_MAX_NODES, max(1024, DEFAULT_NODE_BYTES // (8 * S)))
    E, ops = emission_table(world), world.products
    logW = max_product_bounds(world, z)
    shift = logW.max(1, keepdim=True).values.clamp_min(-1e300)  # rows of W scaled to max 1
    W = (logW - shift).exp()
    allowed = [_allowed(int(v), V) for v in z.tolist()]
    heap: list[tuple[float, tuple[int, ...], torch.Tensor | None, float]] = []
    pushes = 0

    def expand(prefix: tuple[int, ...], f: torch.Tensor | None, ls: float) -> None:
        nonlocal pushes
        t = len(prefix)
        a = world.initial if f is None else ops.right(f[None])[0]
        toks = allowed[t]
        g = E[toks] * a[None]  # [n, S]
        mass = row_sums(g)
        ok = mass > 0
        g, mass, toks = g[ok] / mass[ok, None], mass[ok], toks[ok]
        lj = ls + mass.log()
        last = t == T - 1
        bound = lj if last else lj + shift[t, 0] + dense_product(g, W[t, :, None])[:, 0].log()
        keep = (bound > float("-inf")).nonzero().reshape(-1).tolist()
        pushes += len(keep)
        if pushes > budget:
            raise SearchBudgetError(f"the exact mode search needed more than {budget} nodes (T = {T}, S = {S}); "
                                    "give a smaller T, more revealed tokens, or a larger max_nodes")
        bl, ll, tl = bound.tolist(), lj.tolist(), toks.tolist()
        for j in keep:
            heapq.heappush(heap, (-bl[j], prefix + (tl[j],), None if last else g[j], ll[j]))

    expand((), None, 0.0)
    seqs, lps = [], []
    while heap and len(seqs) < int(k):
        neg, prefix, f, ls = heapq.heappop(heap)
        if len(prefix) == T:
            seqs.append(prefix)
            lps.append(ls)
        else:
            expand(prefix, f, ls)
    if not seqs:
        return torch.zeros(0, T, dtype=torch.long), torch.zeros(0, dtype=torch.float64)
    return torch.tensor(seqs, dtype=torch.long), torch.tensor(lps, dtype=torch.float64)
