"""The dependence-profile figure: the world's exact I(X_i; X_{i+d}) (d = 1..64) against the plug-in estimate of
every row's samples at :data:`~dllm_lit.metrics.functional.world.DEP_DISTANCES`, each with a 95% percentile
bootstrap band over sequences (resamples drawn from a fixed seed).  The exact samples' row shows the plug-in
floor (its bias at this N, T); a sampler below it has lost dependence at that distance."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from dllm_lit.metrics.dependence import empirical_profile
from dllm_lit.metrics.functional.world import DEP_DISTANCES, exact_world_profile
from dllm_lit.results.figures import finish_figure, plt

__all__ = ["profile_band", "plot_dependence_profile"]


def profile_band(x: torch.Tensor, vocab_size: int, resamples: int = 50, seed: int = 0,
                 confidence: float = 0.95) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(estimate, low, high) of the plug-in profile of samples x [N, T] over :data:`DEP_DISTANCES`."""
    est = empirical_profile(x, vocab_size)
    g = torch.Generator().manual_seed(seed)
    draws = torch.stack([empirical_profile(x[torch.randint(0, x.shape[0], (x.shape[0],), generator=g)], vocab_size)
                         for _ in range(resamples)])
    q = torch.tensor([(1 - confidence) / 2, (1 + confidence) / 2], dtype=torch.float64)
    lo, hi = torch.nanquantile(draws, q[0], dim=0), torch.nanquantile(draws, q[1], dim=0)
    return est, torch.minimum(lo, est), torch.maximum(hi, est)


def plot_dependence_profile(world: Any, labels: Sequence[str], samples: Sequence[torch.Tensor | None], path: Path,
                            formats: Iterable[str] = ("png",), caption: str = "", resamples: int = 50) -> list[Path]:
    """Write ``path.<fmt>``: the exact curve and one banded curve per row with samples (see module docstring)."""
    exact = exact_world_profile(world)
    fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=120)
    ax.plot(range(1, exact.numel() + 1), exact.clamp_min(1e-12).tolist(), color="black", lw=1.5,
            label="exact I(X_i; X_i+d)")
    for label, x in zip(labels, samples):
        if x is None or x.shape[1] < 2:
            continue
        est, lo, hi = profile_band(x.long(), world.vocab_size, resamples)
        ok = ~est.isnan()
        ds = [d for d, k in zip(DEP_DISTANCES, ok.tolist()) if k]
        (line,) = ax.plot(ds, est[ok].clamp_min(1e-12).tolist(), marker="o", ms=3, lw=1, label=label)
        ax.fill_between(ds, lo[ok].clamp_min(1e-12).tolist(), hi[ok].clamp_min(1e-12).tolist(),
                        color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("distance d")
    ax.set_ylabel("I(X_i; X_i+d) (nats)")
    return finish_figure(fig, ax, path, formats, caption)
