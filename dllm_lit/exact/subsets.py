"""The exact law of a uniformly random subset of the masked positions: the unmasking rule of the paper's "MDLM"
(LLaDA with random remasking), of the random tie rule among equal scores, and the law of the decode steps when a
uniformly random order is cut into rounds."""
from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable

import torch

from dllm_lit.exact.core import PosteriorCache, State

__all__ = ["random_subset_step", "random_order_steps_law"]

#: (posterior rows [T, V] of the state, position) -> the position's token options [(token, probability)]
Options = Callable[[torch.Tensor, int], list[tuple[int, float]]]


def random_subset_step(dist: dict[State, float], post: PosteriorCache, mask_id: int, k: int, options: Options,
                       lo: int = 0, hi: int | None = None) -> dict[State, float]:
    """One step that unmasks a uniformly random k-subset of the masked positions in [lo, hi) of each state
    (probability 1 / C(n, k) each), every chosen position independently taking a token from ``options``:

        P(z -> z') = C(n, k)^-1 prod_{i in S} q_i(z'_i),    S = the positions z' reveals.

    Zero-probability successors are dropped."""
    new: dict[State, float] = defaultdict(float)
    for z, pz in dist.items():
        g = post(z)
        masked = [i for i in range(lo, len(z) if hi is None else hi) if z[i] == mask_id]
        subsets = list(itertools.combinations(masked, k))
        opts = {i: options(g, i) for i in masked}
        for sub in subsets:
            for combo in itertools.product(*(opts[i] for i in sub)):
                pr = pz / len(subsets)
                zz = list(z)
                for i, (v, q) in zip(sub, combo):
                    zz[i] = v
                    pr *= q
                if pr > 0:
                    new[tuple(zz)] += pr
    return new


def random_order_steps_law(T: int, counts: list[int]) -> dict[tuple[int, ...], float]:
    """Law of the decode steps d (d_i = step at which position i unmasks) when a uniformly random order of the T
    positions is cut into rounds of ``counts[j]`` positions: P(d) = prod_j counts[j]! / T! for every d with
    ``counts[j]`` positions at step j (enumerated over the T! orders)."""
    if sum(counts) != T:
        raise ValueError(f"counts must sum to T {T}, got {counts}")
    cut = [j for j, c in enumerate(counts) for _ in range(c)]
    seen: Counter = Counter()
    for perm in itertools.permutations(range(T)):
        d = [0] * T
        for rank, pos in enumerate(perm):
            d[pos] = cut[rank]
        seen[tuple(d)] += 1
    total = math.factorial(T)
    return {d: c / total for d, c in seen.items()}
