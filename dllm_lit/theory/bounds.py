r"""Bounds on a schedule's expected KL(chain || sampler | order) from TC, DTC or the full-conditional information,
and the schedule templates that minimise them (derived for this project; ``docs/theory.md``).

Let Z_1 <= .. <= Z_L be the information curve of a segment (:func:`~dllm_lit.theory.information.information_curve`;
non-decreasing, as revealing more never lowers the mutual information) and z_j = Z_j - Z_1 (Z_1 = 0 without a
revealed left neighbour).  For a uniformly random order the j-th position's information about the earlier ones is
Z_j on average, so

    TC  = sum_j z_j          (total correlation of the segment, given its revealed left neighbour if any),
    DTC = sum_j (Z_L - Z_j)  (dual total correlation),     I_full = Z_L - Z_1.

With rounds of sizes k_r ending at s_r (s_0 = 0) the exact expected KL is sum_r sum_{l<k_r} (Z_{s_{r-1}+l+1} -
Z_{s_{r-1}+1}) <= sum_r (k_r - 1) a_r, where a_r = Z_{s_r} - Z_{s_{r-1}+1} >= 0 is Z's rise inside round r.  As z
is non-negative and non-decreasing, z_j >= a_1 + .. + a_r for every j >= s_r, and Z_L - Z_j >= a_r for every
j <= s_{r-1} + 1; summing over j,

    sum_r a_r (L - s_r + 1) <= TC,     sum_r a_r (s_{r-1} + 1) <= DTC,     sum_r a_r <= I_full,

hence three bounds that hold for every law and every schedule (no constants, no logarithmic factors):

    E KL <= TC  * max_r (k_r - 1) / (L - s_r + 1)      (TC bound)
    E KL <= DTC * max_r (k_r - 1) / (s_{r-1} + 1)      (DTC bound)
    E KL <= I_full * max_r (k_r - 1)                     (full-conditional bound)

The TC bound asks for rounds that shrink as the run ends (few positions left), the DTC bound for rounds that
grow from one position; the *templates* ``tc`` / ``dtc`` are the m-round schedules minimising the factor in
front of TC / DTC (they depend on L and m only, not on the chain).  Their factors are about (L + 1)^{1/m} - 1
~ ln(L) / m, the O~(TC / K) and O~(DTC / K) rates of Zhao and Cai (*Adaptation to Intrinsic Dependence in
Diffusion Language Models*, arXiv 2602.20126; their schedules randomise the round sizes and are not
reproduced here) and of Chen, Cong and Li (arXiv 2511.04647); the full-conditional bound has the
(L / K) x (mutual information) form of Li and Cai (*A Convergence Theory for Diffusion Language Models*,
arXiv 2505.21400).  The constants and schedules here are this project's own derivation.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dllm_lit.engine.budget import check_setup_time

__all__ = ["curve_totals", "tc_factor", "dtc_factor", "schedule_bounds", "blocks_bounds", "template_schedule", "TEMPLATES",
           "check_template_size"]

#: CPU seconds per greedy round of the template bisection (measured: 0.4-0.6 us)
_GREEDY_SECONDS = 1e-6
#: bisection halvings of the template's factor
_HALVINGS = 64

#: schedule templates by the bound they minimise
TEMPLATES = ("tc", "dtc")


def _ends(sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """(k_r, s_{r-1}) of the non-empty rounds, and L."""
    k = np.array([int(v) for v in sizes if int(v) > 0], dtype=np.int64)
    if any(int(v) < 0 for v in sizes):
        raise ValueError(f"round sizes must be >= 0, got {list(sizes)}")
    start = np.concatenate([[0], np.cumsum(k)[:-1]]) if k.size else k
    return k, start, int(k.sum())


def tc_factor(sizes: Sequence[int]) -> float:
    """max_r (k_r - 1) / (L - s_r + 1): the factor in front of TC."""
    k, start, L = _ends(sizes)
    return float(((k - 1) / (L - (start + k) + 1)).max()) if k.size else 0.0


def dtc_factor(sizes: Sequence[int]) -> float:
    """max_r (k_r - 1) / (s_{r-1} + 1): the factor in front of DTC."""
    k, start, _ = _ends(sizes)
    return float(((k - 1) / (start + 1)).max()) if k.size else 0.0


def curve_totals(Z: np.ndarray) -> dict[str, float]:
    """``{"tc", "dtc", "mi"}`` of a segment from its information curve Z[0..L] (nats)."""
    z = np.asarray(Z, dtype=np.float64)[1:]
    return {"tc": float((z - z[0]).sum()), "dtc": float((z[-1] - z).sum()), "mi": float(z[-1] - z[0])}


def schedule_bounds(Z: np.ndarray, sizes: Sequence[int]) -> dict[str, float]:
    """``{"tc", "dtc", "mi"}``: the three upper bounds (nats) on the expected KL of rounds ``sizes``
    (summing to L = len(Z) - 1) for the segment whose information curve is ``Z``."""
    L = len(Z) - 1
    if sum(int(v) for v in sizes) != L:
        raise ValueError(f"round sizes must sum to the length {L}, got {list(sizes)}")
    tot = curve_totals(Z)
    kmax = max(int(v) for v in sizes)
    return {"tc": tot["tc"] * tc_factor(sizes), "dtc": tot["dtc"] * dtc_factor(sizes),
            "mi": tot["mi"] * (kmax - 1)}


def _greedy(L: int, rounds: int, beta: float, kind: str) -> list[int] | None:
    """Largest rounds whose factor stays <= beta, front to back; None if they need more than ``rounds``."""
    sizes, s = [], 0
    while s < L:
        if len(sizes) == rounds:
            return None
        if kind == "tc":  # (k - 1) <= beta (L - s - k + 1)  <=>  k <= (1 + beta (L - s + 1)) / (1 + beta)
            k = int(np.floor((1.0 + beta * (L - s + 1)) / (1.0 + beta) + 1e-12))
        else:  # (k - 1) <= beta (s + 1)
            k = int(np.floor(1.0 + beta * (s + 1) + 1e-12))
        k = max(1, min(k, L - s))
        sizes.append(k)
        s += k
    return sizes


def check_template_size(length: int, rounds: int, names: tuple[str, str] = ("length", "rounds")) -> None:
    """One line naming the field when :func:`template_schedule` would take more than
    :data:`~dllm_lit.engine.budget.SETUP_SECONDS`: 64 bisection halvings of up to min(rounds, L) greedy rounds
    (~1 us each), or a list of ``rounds`` sizes, before any work."""
    L, m = int(length), int(rounds)
    work = m if m >= L else _HALVINGS * m
    check_setup_time(f"{names[0]}={L} with {names[1]}", m, _GREEDY_SECONDS * work,
                     f"the schedule template ({_HALVINGS} bisection halvings of up to {names[1]} greedy rounds)")


def template_schedule(kind: str, length: int, rounds: int) -> list[int]:
    """The ``rounds`` round sizes (zeros at the end when fewer suffice) minimising the ``kind`` factor
    (``"tc"`` or ``"dtc"``) for a segment of ``length`` positions.

    The greedy schedule (each round as large as a factor beta allows) needs the fewest rounds for that
    factor: the positions it has revealed after any round are at least those of any other schedule within
    beta (s + k_max(s) is non-decreasing in s).  Bisection on beta (float64, 64 halvings) then finds the
    smallest feasible factor; the bound always uses the returned schedule's own factor."""
    if kind not in TEMPLATES:
        raise ValueError(f"template must be one of {', '.join(TEMPLATES)}, got {kind!r}")
    L, m = int(length), int(rounds)
    if L < 1 or m < 1:
        raise ValueError(f"length and rounds must be >= 1, got {length} and {rounds}")
    check_template_size(L, m)
    if m >= L:
        return [1] * L + [0] * (m - L)
    lo, hi = 0.0, float(L - 1)  # beta = L - 1 allows a single round
    for _ in range(_HALVINGS):
        mid = 0.5 * (lo + hi)
        if _greedy(L, m, mid, kind) is None:
            lo = mid
        else:
            hi = mid
    sizes = _greedy(L, m, hi, kind)
    return sizes + [0] * (m - len(sizes))


def blocks_bounds(info, blocks: Sequence[tuple[int, bool, str, Sequence[float]]]) -> dict[str, float] | None:
    """The three bounds (nats) summed over blocks decoded left to right (the same ``blocks`` as
    :func:`~dllm_lit.theory.schedules.blocks_kl`; each block's bound holds for its conditional law given
    the revealed left neighbour, and the exact KL adds over blocks).  None when a block's rounds are drawn
    by coins (``"weights"``): the bounds are stated for fixed round sizes."""
    out = {"tc": 0.0, "dtc": 0.0, "mi": 0.0}
    for length, left, kind, values in blocks:
        if kind != "sizes":
            return None
        for key, v in schedule_bounds(info.curve(length, left), [int(x) for x in values]).items():
            out[key] += v
    return out
