"""Paper-style figures: a metric against the number of sampling steps, one line per sampler.

Steps are on a log2 axis (8, 16, ..., 1024), the AR baseline (exact chain samples) is a dashed
horizontal line, and bootstrap intervals (``<key>_ci``), when present, are drawn as bands - the
layout of the paper's Fig. 2-4.  Which keys get a figure, and their axis labels, come from the
results registry (:mod:`dllm_lit.results.registry`).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dllm_lit.atomic import atomic_write  # noqa: E402
from dllm_lit.results import registry  # noqa: E402

__all__ = ["plot_kl_bracket", "plot_metric", "write_figures"]


def plot_metric(rows: list[dict[str, Any]], key: str, path: Path, title: str | None = None) -> Path:
    """Plot ``key`` against steps for every sampler in ``rows``; AR rows (steps None) dashed. Atomic write."""
    label = registry.labels().get(key, key)
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ar = [r for r in rows if r.get("steps") is None and r.get(key) is not None]
    for r in rows:
        if r.get("steps") is not None and r.get(key) is not None:
            series[r["sampler"]].append(r)
    fig, ax = plt.subplots(figsize=(5.0, 3.6), dpi=120)
    for name, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["steps"])
        xs = [r["steps"] for r in rs]
        ys = [r[key] for r in rs]
        (line,) = ax.plot(xs, ys, marker="o", ms=3, label=name)
        cis = [r.get(f"{key}_ci") for r in rs]
        if all(ci is not None for ci in cis):
            ax.fill_between(xs, [c[0] for c in cis], [c[1] for c in cis], color=line.get_color(), alpha=0.2, lw=0)
    for r in ar[:1]:
        ax.axhline(r[key], color="black", ls="--", lw=1, label="AR (exact)")
        ci = r.get(f"{key}_ci")
        if ci is not None:
            ax.axhspan(ci[0], ci[1], color="black", alpha=0.08, lw=0)
    if any(series.values()):
        ax.set_xscale("log", base=2)
    ax.set_xlabel("sampling steps")
    ax.set_ylabel(label)
    ax.set_title(title or label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png"))
    finally:
        plt.close(fig)
    return path


def plot_kl_bracket(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Per sampler against steps: the plug-in transition KL (dotted), the floor-corrected KL
    ``kl_excess`` (solid) and the per-token sequence-KL bracket [``seq_kl_lower``, ``seq_kl_upper``]
    (band from max(0, lower), upper end dashed).  Symlog y axis (the floor-corrected values can be negative).  None
    when no row has the floor-corrected columns.  Atomic write."""
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("steps") is not None and r.get("kl_excess") is not None:
            series[r["sampler"]].append(r)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=120)
    for name, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["steps"])
        xs = [r["steps"] for r in rs]
        (line,) = ax.plot(xs, [r["kl_excess"] for r in rs], marker="o", ms=3, label=f"{name}: KL - exact floor")
        color = line.get_color()
        ax.plot(xs, [r["kl"] for r in rs], ls=":", color=color, lw=1, label=f"{name}: plug-in KL")
        if all(r.get("seq_kl_upper") is not None for r in rs):
            lo, hi = [max(0.0, r["seq_kl_lower"]) for r in rs], [r["seq_kl_upper"] for r in rs]  # the KL is >= 0
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
            ax.plot(xs, hi, ls="--", color=color, lw=1, label=f"{name}: sequence KL/token bracket")
        else:
            ax.plot(xs, [r["seq_kl_lower"] for r in rs], ls="-.", color=color, lw=1,
                    label=f"{name}: sequence KL/token lower end")
    for r in rows:
        if r.get("steps") is None and r.get("kl") is not None and r.get("kl_excess") == 0.0:
            ax.axhline(r["kl"], color="black", ls="--", lw=1, label="exact samples: plug-in KL (floor)")
            break
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xlabel("sampling steps")
    ax.set_ylabel("nats (per transition / per token)")
    ax.set_title("KL: plug-in, floor-corrected, sequence bracket")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png"))
    finally:
        plt.close(fig)
    return path


#: figures drawn from whole rows (several keys each): name -> function(rows, path) -> path or None
ROW_FIGURES = {"kl_bracket": plot_kl_bracket}


def write_figures(rows: list[dict[str, Any]], out_dir: Path, keys: tuple[str, ...] | None = None) -> list[Path]:
    """One PNG per metric key present in ``rows``: ``<out_dir>/figures/<key>_vs_steps.png``
    (default keys: the registry's figure keys), plus the :data:`ROW_FIGURES` (with the default keys)."""
    paths = []
    for key in registry.figure_keys() if keys is None else keys:
        if any(r.get(key) is not None for r in rows):
            paths.append(plot_metric(rows, key, Path(out_dir) / "figures" / f"{key}_vs_steps.png"))
    if keys is None:
        for name, draw in ROW_FIGURES.items():
            path = draw(rows, Path(out_dir) / "figures" / f"{name}_vs_steps.png")
            if path is not None:
                paths.append(path)
    return paths
