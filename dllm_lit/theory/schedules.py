r"""Expected KL(chain || sampler | order) of a random-order unmasking schedule, and the optimal schedule.

A sampler that reveals a uniformly random order of L positions in rounds of sizes k_1..k_m and draws
each round's tokens independently from their exact conditionals given the revealed ones has, for a
fixed order, q(x | order) = prod_r prod_{i in round r} p(x_i | x_revealed), so

    KL(p || q(. | order)) = sum_r TC(X_round r | X_revealed before r)    (conditional total correlation).

Averaging over orders (exchangeability within a round, chain rule for H(X_round | X_revealed)) gives,
with s_r = k_1 + .. + k_r and the information curve Z of :func:`~dllm_lit.theory.information.information_curve`,

    E_order KL = sum_r sum_{l=0}^{k_r - 1} (Z_{s_{r-1}+l+1} - Z_{s_{r-1}+1})
               = sum_j Z_j - sum_r k_r Z_{s_{r-1}+1}:

the gap between the sum of Z and its left Riemann sum on the schedule's grid (Chen, Cong, Li,
*Optimal Inference Schedules for Masked Diffusion Models*, arXiv 2511.04647; derived and checked
here by enumeration).  Rounds drawn by independent per-position coins (MDLM: position decoded in
round r with probability w_r) are a mixture over multinomial round sizes whose expectation is exact:

    E KL = sum_j Z_j - sum_r E[(L - s_{r-1}) rho_r Z_{s_{r-1}+1}],   s_{r-1} ~ Bin(L, w_1 + .. + w_{r-1}),
    rho_r = w_r / (w_r + .. + w_m).

The optimal schedule for m rounds minimises the first form over 0 = s_0 < s_1 < .. < s_m = L by dynamic
programming (O(m L^2)).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dllm_lit.engine.budget import check_memory, check_setup_time
from dllm_lit.theory.information import _log_binom

__all__ = ["uniform_rounds", "round_sizes_kl", "binomial_rounds_kl", "optimal_schedule", "schedule_kl_curve", "blocks_kl",
           "check_optimal_size"]

#: the dynamic program's cost per round and per entry of its (L + 1)^2 table (measured: 1.5-2 ns at L = 1000-4000)
#: and its peak memory per entry (the cost table, one round's sums, the temporaries building the cost table)
_DP_SECONDS = 3e-9
_DP_BYTES = 40


def uniform_rounds(length: int, steps: int) -> list[int]:
    """LLaDA's transfer counts: L // steps per round, the first L % steps rounds one more."""
    base, rem = divmod(int(length), int(steps))
    return [base + (1 if i < rem else 0) for i in range(int(steps))]


def _cum(Z: np.ndarray) -> np.ndarray:
    C = np.cumsum(np.asarray(Z, dtype=np.float64))
    C[0] = 0.0
    return C


def round_sizes_kl(Z: np.ndarray, sizes: Sequence[int]) -> float:
    """E_order KL(p || q(. | order)) in nats for rounds of the given sizes (zeros allowed; they must sum to L)."""
    L = len(Z) - 1
    sizes = [int(k) for k in sizes]
    if any(k < 0 for k in sizes) or sum(sizes) != L:
        raise ValueError(f"round sizes must be >= 0 and sum to the length {L}, got {sizes}")
    C, s, kl = _cum(Z), 0, 0.0
    for k in sizes:
        if k:
            kl += C[s + k] - C[s] - k * Z[s + 1]
            s += k
    return max(float(kl), 0.0)  # exact 0 for one-position rounds (float rounding)


def binomial_rounds_kl(Z: np.ndarray, weights: Sequence[float]) -> float:
    """E KL in nats when every position is decoded in round r with probability ``weights[r]`` independently
    (the weights must sum to 1: every position is decoded), expectation over round sizes and orders."""
    L = len(Z) - 1
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(f"round weights must be >= 0 and sum to 1, got sum {w.sum()}")
    C = _cum(Z)
    s = np.arange(L + 1, dtype=np.float64)
    logc = _log_binom(L, s)
    before, total = 0.0, float(C[L])
    for wr in w:
        left = 1.0 - before
        if wr > 0 and left > 0:
            rho = min(wr / left, 1.0)
            with np.errstate(divide="ignore"):
                lp = logc + s * np.log(before) + (L - s) * np.log(left) if 0 < before < 1 else None
            pmf = np.exp(lp) if lp is not None else (s == (L if before >= 1 else 0)).astype(np.float64)
            zs = np.append(Z[1:], 0.0)  # Z_{s+1}; at s = L nothing is left (L - s = 0)
            total -= float((pmf * (L - s) * rho * zs).sum())
        before += wr
    return max(total, 0.0)


def check_optimal_size(length: int, rounds: int, names: tuple[str, str] = ("length", "rounds")) -> None:
    """One line naming the field when the dynamic program of :func:`optimal_schedule` would not fit this machine's
    memory (~40 (L + 1)^2 bytes) or would take more than :data:`~dllm_lit.engine.budget.SETUP_SECONDS`
    (~3 ns x rounds x (L + 1)^2), before any work; ``names`` are the caller's fields for L and rounds."""
    L, m = int(length), min(int(rounds), int(length))
    if m >= L:  # one position per round: no table
        return
    n = float(L + 1) ** 2
    check_memory(names[0], L, _DP_BYTES * n, f"the optimal schedule's dynamic program over (L + 1)^2 = {n:.3g} entries")
    check_setup_time(f"{names[0]}={L} with {names[1]}", m, _DP_SECONDS * m * n,
                     f"the optimal schedule's dynamic program ({names[1]} x (L + 1)^2 = {m * n:.3g} entries)")


def optimal_schedule(Z: np.ndarray, rounds: int) -> tuple[list[int], float]:
    """(round sizes, E KL) of the schedule with min(rounds, L) non-empty rounds that minimises E KL (DP)."""
    L = len(Z) - 1
    m = min(int(rounds), L)
    if m < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if m == L:  # one position per round: exact sampling, KL 0
        return [1] * L, 0.0
    check_optimal_size(L, m)
    C = _cum(Z)
    a = np.arange(L + 1)
    # costT[j, i]: the cost of a round revealing positions i+1..j (inf unless i < j), stored by end j so that
    # each round's minimum over i runs along contiguous rows (5x faster than along columns at L = 4000; the
    # same additions, and argmin's first minimum, as the column layout)
    costT = C[:, None] - C[None, :] - (a[:, None] - a[None, :]) * np.append(Z[1:], 0.0)[None, :]
    costT[a[None, :] >= a[:, None]] = np.inf
    F = np.full(L + 1, np.inf)
    F[0] = 0.0
    back = np.zeros((m, L + 1), dtype=np.int64)
    tot = np.empty_like(costT)
    for r in range(m):
        np.add(costT, F[None, :], out=tot)
        back[r] = np.argmin(tot, axis=1)
        F = tot[a, back[r]]
    sizes, b = [], L
    for r in range(m - 1, -1, -1):
        prev = int(back[r, b])
        sizes.append(b - prev)
        b = prev
    return sizes[::-1], float(max(F[L], 0.0))


def schedule_kl_curve(Z: np.ndarray, steps: Sequence[int], schedule: str = "uniform") -> list[float]:
    """E KL per token (nats / L) for each step count: ``"uniform"`` rounds or the ``"optimal"`` DP schedule."""
    L = len(Z) - 1
    if schedule == "uniform":
        return [round_sizes_kl(Z, uniform_rounds(L, s)) / L for s in steps]
    if schedule == "optimal":
        return [optimal_schedule(Z, s)[1] / L for s in steps]
    raise ValueError(f"schedule must be 'uniform' or 'optimal', got {schedule!r}")


def blocks_kl(info, blocks: Sequence[tuple[int, bool, str, Sequence[float]]]) -> float:
    """E KL in nats of a sequence decoded block by block, left to right (a whole sequence: one block).

    ``info``: a :class:`~dllm_lit.theory.information.ChainInformation`; each block is ``(length,
    left_revealed, kind, values)`` with ``kind`` "sizes" (fixed round sizes, a uniformly random order) or
    "weights" (per-position round probabilities, :func:`binomial_rounds_kl`).  Earlier blocks are fully
    revealed, so a later block sees only its left neighbour (Markov property): the KL adds over blocks."""
    total = 0.0
    for length, left, kind, values in blocks:
        Z = info.curve(length, left)
        if kind == "sizes":
            total += round_sizes_kl(Z, [int(v) for v in values])
        elif kind == "weights":
            total += binomial_rounds_kl(Z, values)
        else:
            raise ValueError(f"block kind must be 'sizes' or 'weights', got {kind!r}")
    return total
