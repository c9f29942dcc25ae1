"""Conformance of a sampler's sequence law on a tiny chain: goodness of fit to an exact law, or two samples.

On a chain with V^T small, every complete sequence is one outcome.  :func:`goodness_of_fit` compares N samples
with an exact law (a rule's law by dynamic programming, :mod:`dllm_lit.exact`) by Pearson's chi-square test;
:func:`two_sample` compares two samplers' samples by the chi-square test of homogeneity.  Outcomes with an
expected count below 5 are pooled into one cell; an outcome of probability zero that was observed gives
p = 0.  Both report the statistic, its degrees of freedom, the p-value, the total-variation distance between
the empirical laws (or empirical vs exact), the most over- and under-sampled sequences, and the power: the
smallest TV the test detects with probability 0.8 at level ``alpha`` (:func:`detectable_tv`).
:func:`assert_conforms` is the pytest helper.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = ["Conformance", "goodness_of_fit", "two_sample", "detectable_tv", "samples_for_tv", "law_dof",
           "sequence_counts", "assert_conforms"]

MIN_EXPECTED = 5.0
POWER = 0.8


def sequence_counts(samples: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Counts of the V^T complete sequences (lexicographic index, first position most significant): int64 [V^T]."""
    x = samples.long().cpu()
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(f"samples must be a non-empty [N, T] tensor, got shape {tuple(x.shape)}")
    if bool(((x < 0) | (x >= vocab_size)).any()):
        raise ValueError(f"samples hold ids outside 0..{vocab_size - 1}")
    T = x.shape[1]
    if vocab_size ** T > 2**24:
        raise ValueError(f"V^T = {vocab_size}^{T} outcomes is too many for a sequence-level test (at most 2^24)")
    code = (x * (vocab_size ** torch.arange(T - 1, -1, -1))).sum(1)
    return torch.bincount(code, minlength=vocab_size ** T)


def _chi2_sf(stat: float, dof: int) -> float:
    """P(chi2(dof) > stat): the regularised upper incomplete gamma Q(dof/2, stat/2)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))


def _chi2_isf(alpha: float, dof: int) -> float:
    """The (1 - alpha) quantile of chi2(dof), by bisection on :func:`_chi2_sf`."""
    lo, hi = 0.0, dof + 50.0 * math.sqrt(2.0 * dof) + 100.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _chi2_sf(mid, dof) > alpha else (lo, mid)
    return 0.5 * (lo + hi)


def detectable_tv(n: float, dof: int, alpha: float = 0.01, power: float = POWER) -> float:
    """The smallest TV distance the chi-square test detects with probability ``power`` at level ``alpha``.

    The test statistic under an alternative is about noncentral chi2(dof, lambda) with lambda = n chi2(p || q)
    (Pearson's divergence); with the normal approximation N(dof + lambda, 2 (dof + 2 lambda)) the power is reached
    at lambda* solving dof + lambda - z_power sqrt(2 (dof + 2 lambda)) = crit.  Since chi2(p || q) >= 4 TV^2,
    every alternative with TV >= sqrt(lambda* / n) / 2 has lambda >= lambda*.  ``n`` is the sample size
    (for two samples of sizes n1, n2: n1 n2 / (n1 + n2)).
    """
    crit = _chi2_isf(alpha, dof)
    z = math.sqrt(2.0) * float(torch.special.erfinv(torch.tensor(2.0 * power - 1.0, dtype=torch.float64)))
    lo, hi = 0.0, 10.0 * (crit + dof + 10.0)
    for _ in range(200):
        lam = 0.5 * (lo + hi)
        if dof + lam - z * math.sqrt(2.0 * (dof + 2.0 * lam)) >= crit:
            hi = lam
        else:
            lo = lam
    return 0.5 * math.sqrt(hi / n)


def law_dof(law: torch.Tensor, n: float) -> int:
    """The degrees of freedom :func:`goodness_of_fit` will have at N = ``n`` against ``law``: the outcomes with an
    expected count of at least 5, plus one pooled cell for the rest (if it has mass), minus one."""
    exp = law.double() * n
    big = int((exp >= MIN_EXPECTED).sum())
    pooled = bool((exp[exp < MIN_EXPECTED] > 0).any())
    return max(big + int(pooled) - 1, 1)


def samples_for_tv(target_tv: float, dof_at: Callable[[float], int], alpha: float = 0.01, power: float = POWER,
                   pairs: bool = False) -> int:
    """The smallest N (to 1 %) at which :func:`detectable_tv` is at most ``target_tv``; ``dof_at(n)`` gives the
    test's degrees of freedom at N = n.  ``pairs``: two samples of N each (effective size N / 2)."""
    if not 0 < target_tv < 1:
        raise ValueError(f"the target TV must lie in (0, 1), got {target_tv}")

    def ok(n: float) -> bool:
        return detectable_tv(n / 2 if pairs else n, dof_at(n), alpha, power) <= target_tv

    lo, hi = 1.0, 100.0
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > 1e10:
            raise ValueError(f"no N up to 1e10 detects TV {target_tv}")
    while hi > 1.01 * lo:
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return int(math.ceil(hi))


@dataclass
class Conformance:
    """The outcome of a conformance test (see the module docstring); ``str()`` is the printed report."""

    statistic: float
    dof: int
    p_value: float
    tv: float
    n: int
    detectable_tv: float
    alpha: float
    #: (sequence, observed frequency, reference frequency) of the largest excesses and deficits
    over: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)
    under: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)
    reference: str = "exact law"
    #: lines printed before the verdict (e.g. conform's dtype-sensitivity note)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.p_value > self.alpha

    def verdict(self) -> str:
        if self.passed:
            return (f"CONFORMS: p = {self.p_value:.3g} > {self.alpha:g}; at N = {self.n} this test detects, with "
                    f"probability {POWER:g}, any law at TV >= {self.detectable_tv:.3g} from the {self.reference}")
        return (f"DIFFERS: p = {self.p_value:.3g} <= {self.alpha:g} (TV {self.tv:.3g} from the {self.reference}; at "
                f"N = {self.n} this test detects TV >= {self.detectable_tv:.3g})")

    def __str__(self) -> str:
        lines = [f"chi-square {self.statistic:.2f}, dof {self.dof}, p-value {self.p_value:.3g}, "
                 f"TV {self.tv:.4f}, N {self.n}"]
        for title, rows in (("most over-sampled", self.over), ("most under-sampled", self.under)):
            lines.append(f"{title} (sequence: sampled vs {self.reference}):")
            lines += [f"  {' '.join(map(str, s))}: {o:.4f} vs {e:.4f}" for s, o, e in rows]
        lines += self.notes
        lines.append(self.verdict())
        return "\n".join(lines)


def _decode(code: int, V: int, T: int) -> tuple[int, ...]:
    out = []
    for _ in range(T):
        code, r = divmod(code, V)
        out.append(r)
    return tuple(reversed(out))


def _extremes(obs: torch.Tensor, ref: torch.Tensor, V: int, T: int, top: int):
    diff = obs - ref
    order = torch.argsort(diff, descending=True, stable=True)
    over = [(_decode(int(i), V, T), float(obs[i]), float(ref[i])) for i in order[:top] if diff[i] > 0]
    under = [(_decode(int(i), V, T), float(obs[i]), float(ref[i])) for i in order.flip(0)[:top] if diff[i] < 0]
    return over, under


def goodness_of_fit(samples: torch.Tensor, law: torch.Tensor, alpha: float = 0.01, top: int = 5,
                    reference: str = "exact law") -> Conformance:
    """Pearson's chi-square test of samples [N, T] against ``law`` [V^T] (:func:`sequence_counts` order)."""
    law = law.double().cpu()
    T = samples.shape[1]
    V = round(law.numel() ** (1.0 / T))
    if V ** T != law.numel():
        raise ValueError(f"law has {law.numel()} entries; samples of length {T} need V^{T}")
    if abs(float(law.sum()) - 1.0) > 1e-9 or bool((law < 0).any()):
        raise ValueError(f"law must be a probability vector (sum {float(law.sum()):.12g})")
    obs = sequence_counts(samples, V).double()
    n = float(obs.sum())
    exp = law * n
    if bool((obs[exp == 0] > 0).any()):
        stat, p = math.inf, 0.0
        dof = max(int((exp >= MIN_EXPECTED).sum()), 1)
    else:
        small = exp < MIN_EXPECTED
        o = torch.cat([obs[~small], obs[small].sum()[None]]) if small.any() else obs
        e = torch.cat([exp[~small], exp[small].sum()[None]]) if small.any() else exp
        keep = e > 0
        o, e = o[keep], e[keep]
        stat = float(((o - e) ** 2 / e).sum())
        dof = max(int(o.numel()) - 1, 1)
        p = _chi2_sf(stat, dof)
    emp = obs / n
    over, under = _extremes(emp, law, V, T, top)
    return Conformance(stat, dof, p, 0.5 * float((emp - law).abs().sum()), int(n), detectable_tv(n, dof, alpha),
                       alpha, over, under, reference)


def two_sample(a: torch.Tensor, b: torch.Tensor, vocab_size: int, alpha: float = 0.01, top: int = 5,
               reference: str = "reference sampler") -> Conformance:
    """Chi-square test of homogeneity of two samplers' samples [N1, T] and [N2, T] (cells with a pooled
    expected count below 5 pooled together)."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"both samples need the same length, got {a.shape[1]} and {b.shape[1]}")
    T = a.shape[1]
    ca, cb = sequence_counts(a, vocab_size).double(), sequence_counts(b, vocab_size).double()
    na, nb = float(ca.sum()), float(cb.sum())
    tot = ca + cb
    pooled = tot / (na + nb)
    small = (pooled * min(na, nb)) < MIN_EXPECTED
    cols = [torch.stack([ca[~small], cb[~small]])]
    if small.any():
        cols.append(torch.stack([ca[small].sum(), cb[small].sum()])[:, None])
    table = torch.cat(cols, 1)
    table = table[:, table.sum(0) > 0]
    exp = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = float(((table - exp) ** 2 / exp).sum())
    dof = max(int(table.shape[1]) - 1, 1)
    fa, fb = ca / na, cb / nb
    over, under = _extremes(fa, fb, vocab_size, T, top)
    n_eff = na * nb / (na + nb)
    return Conformance(stat, dof, _chi2_sf(stat, dof), 0.5 * float((fa - fb).abs().sum()), int(na),
                       detectable_tv(n_eff, dof, alpha), alpha, over, under, reference)


def assert_conforms(samples: torch.Tensor, law: torch.Tensor | None = None, *, other: torch.Tensor | None = None,
                    vocab_size: int | None = None, alpha: float = 0.01) -> Conformance:
    """pytest helper: raise AssertionError (with the report) unless ``samples`` conform to the exact ``law``,
    or to the ``other`` sampler's samples (then give ``vocab_size``).  Returns the :class:`Conformance`."""
    if (law is None) == (other is None):
        raise ValueError("give exactly one of law and other")
    if other is not None:
        if vocab_size is None:
            raise ValueError("vocab_size is needed for a two-sample test")
        res = two_sample(samples, other, vocab_size, alpha)
    else:
        res = goodness_of_fit(samples, law, alpha)
    if not res.passed:
        raise AssertionError(str(res))
    return res
