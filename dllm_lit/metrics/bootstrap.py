r"""Percentile bootstrap over sequences, expressed through resample *weights*.

A bootstrap resample of ``N`` items drawn with replacement is fully described by its count vector
:math:`w \sim \mathrm{Multinomial}(N; 1/N, \dots, 1/N)` (:math:`w_i` = how often item ``i`` was
drawn). Any statistic that is a function of per-item sums can then be evaluated on the resample
without materialising it, e.g. a ratio of sums

.. math::
   \hat\theta^{*}_b = \frac{\sum_i w_{bi}\, a_i}{\sum_i w_{bi}\, b_i} ,

which covers every per-sequence-decomposable metric of this package (n-gram diversity, GenPPL via
its mean NLL, ...). The percentile interval at level :math:`1-\alpha` is

.. math::
   \bigl[\,Q_{\alpha/2}(\hat\theta^{*}),\; Q_{1-\alpha/2}(\hat\theta^{*})\,\bigr]

with :math:`Q` the empirical quantile (linear interpolation) over the ``B`` resamples (Efron &
Tibshirani, 1993, ch. 13). The percentile interval is transformation-equivariant: for a monotone
increasing ``g`` the interval of :math:`g(\theta)` is ``g`` applied to the endpoints (used for
:math:`\mathrm{GenPPL} = \exp(\overline{\mathrm{NLL}})`).

Resamples are vectorised: the statistic receives a ``[B_chunk, N]`` float64 matrix of counts, with
``B_chunk * N`` bounded by ``max_chunk_elements`` (chunking over resamples otherwise). Results are
deterministic given ``seed`` (a private CPU ``torch.Generator``; the global RNG is untouched) and,
because the generator draws sequentially, independent of the chunk size (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["bootstrap_ci", "ratio_ci", "resample_weights"]

_DEFAULT_CHUNK_ELEMENTS = 1 << 22


def _check_common(num_items: int, num_resamples: int, confidence: float, seed: int) -> None:
    if not isinstance(num_items, int) or isinstance(num_items, bool) or num_items < 1:
        raise ValueError(f"`num_items` must be an integer >= 1, got {num_items!r}")
    if not isinstance(num_resamples, int) or isinstance(num_resamples, bool) or num_resamples < 2:
        raise ValueError(f"`num_resamples` must be an integer >= 2, got {num_resamples!r}")
    if not isinstance(confidence, (int, float)) or isinstance(confidence, bool) or not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be a float in the open interval (0, 1), got {confidence!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"`seed` must be an integer, got {seed!r}")


def resample_weights(num_items: int, num_resamples: int, generator: torch.Generator) -> Tensor:
    """Draw ``num_resamples`` multinomial count vectors of ``num_items`` uniform draws each.

    Returns a float64 ``Tensor[num_resamples, num_items]`` whose rows sum to ``num_items``.
    """
    idx = torch.randint(0, num_items, (num_resamples, num_items), generator=generator)
    weights = torch.zeros(num_resamples, num_items, dtype=torch.float64)
    weights.scatter_add_(1, idx, torch.ones(num_resamples, num_items, dtype=torch.float64))
    return weights


def bootstrap_ci(
    statistic: Callable[[Tensor], Tensor],
    num_items: int,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    *,
    vectorized: bool = True,
    max_chunk_elements: int = _DEFAULT_CHUNK_ELEMENTS,
) -> tuple[float, float]:
    r"""Percentile bootstrap confidence interval from resample-count weights.

    Args:
        statistic: maps resample counts to the statistic. With ``vectorized=True`` (default) it
            receives a float64 ``Tensor[B, num_items]`` (one row per resample) and must return a
            ``Tensor[B]``; with ``vectorized=False`` it receives one ``Tensor[num_items]`` and
            returns a scalar. For the plug-in estimate, call it with ``torch.ones(num_items)``.
        num_items: number of resampled units (sequences, texts), ``>= 1``.
        num_resamples: ``B``, the number of bootstrap resamples (``>= 2``).
        confidence: coverage level :math:`1-\alpha`, in ``(0, 1)``.
        seed: seed of the private generator (results are deterministic given it).
        vectorized: whether ``statistic`` accepts a batch of weight vectors.
        max_chunk_elements: upper bound on ``B_chunk * num_items`` per call of ``statistic``.

    Returns:
        ``(lower, upper)`` = the :math:`\alpha/2` and :math:`1-\alpha/2` empirical quantiles of the
        bootstrap distribution.

    Raises:
        ValueError: on invalid arguments, a wrongly shaped statistic output, or non-finite
            statistic values (e.g. a zero denominator in some resample).
    """
    _check_common(num_items, num_resamples, confidence, seed)
    if not isinstance(max_chunk_elements, int) or max_chunk_elements < 1:
        raise ValueError(f"`max_chunk_elements` must be an integer >= 1, got {max_chunk_elements!r}")
    generator = torch.Generator().manual_seed(seed)
    chunk = max(1, max_chunk_elements // num_items)
    values: list[Tensor] = []
    done = 0
    while done < num_resamples:
        size = min(chunk, num_resamples - done)
        weights = resample_weights(num_items, size, generator)
        if vectorized:
            out = torch.as_tensor(statistic(weights))
            if out.shape != (size,):
                raise ValueError(
                    f"vectorized `statistic` must map weights of shape {tuple(weights.shape)} to shape "
                    f"({size},), got {tuple(out.shape)}; pass vectorized=False for a per-resample statistic"
                )
        else:
            out = torch.stack([torch.as_tensor(statistic(w)).reshape(()) for w in weights])
        values.append(out.detach().to(device="cpu", dtype=torch.float64))
        done += size
    boot = torch.cat(values)
    bad = int((~torch.isfinite(boot)).sum())
    if bad:
        raise ValueError(f"`statistic` returned non-finite values for {bad} of {num_resamples} bootstrap resamples")
    alpha = 1.0 - float(confidence)
    q = torch.tensor([alpha / 2.0, 1.0 - alpha / 2.0], dtype=torch.float64)
    lower, upper = torch.quantile(boot, q).tolist()
    return float(lower), float(upper)


def ratio_ci(
    numerators: Tensor,
    denominators: Tensor,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    transform: Callable[[float], float] | None = None,
) -> tuple[float, float]:
    r"""Percentile bootstrap CI of a ratio of sums, :math:`\sum_i a_i / \sum_i b_i`.

    Each resample evaluates :math:`\sum_i w_i a_i / \sum_i w_i b_i`, vectorised over the whole
    chunk of resamples.

    Args:
        numerators: per-item :math:`a_i`, shape ``[N]``.
        denominators: per-item :math:`b_i \ge 0`, shape ``[N]``, with a positive total.
        num_resamples, confidence, seed: as in :func:`bootstrap_ci`.
        transform: optional monotone *increasing* map applied to both endpoints (e.g.
            ``math.exp`` for a perplexity from a mean NLL); exact for percentile intervals.
    """
    a = torch.as_tensor(numerators).detach().to("cpu", torch.float64).reshape(-1)
    b = torch.as_tensor(denominators).detach().to("cpu", torch.float64).reshape(-1)
    if a.numel() == 0:
        raise ValueError("`numerators` is empty; pass at least one item")
    if a.shape != b.shape:
        raise ValueError(f"`numerators` and `denominators` must have the same length, got {a.numel()} and {b.numel()}")
    if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(b).all()):
        raise ValueError("`numerators` and `denominators` must be finite")
    if bool((b < 0).any()) or float(b.sum()) <= 0.0:
        raise ValueError("`denominators` must be non-negative with a positive sum")

    def statistic(w: Tensor) -> Tensor:
        # elementwise product + sum rather than a BLAS mat-vec: no BLAS thread pool (which stalls
        # on oversubscribed CPUs) and a reduction order fixed by torch, not by the BLAS build
        return (w * a).sum(dim=-1) / (w * b).sum(dim=-1)

    lower, upper = bootstrap_ci(statistic, a.numel(), num_resamples=num_resamples, confidence=confidence, seed=seed)
    if transform is not None:
        lower, upper = float(transform(lower)), float(transform(upper))
        if not (math.isfinite(lower) and math.isfinite(upper)) or lower > upper:
            raise ValueError("`transform` must be a finite, monotone increasing function")
    return lower, upper
