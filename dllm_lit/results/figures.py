"""Paper-style figures: a metric against the number of sampling steps, one line per row label.

Steps are on a log2 axis with plain tick labels (8, 16, ..., 1024), the reference row (exact chain
samples, the AR baseline) is a dashed horizontal line, other rows without steps (e.g. a sharpened
AR sampler) dotted ones, and bootstrap intervals (``<key>_ci``), when present, are drawn as bands -
the layout of the paper's Fig. 2-4.  A run whose rows have no steps at all (``configs/ar.yaml``)
gets one point per row with its interval instead of a meaningless steps axis.  The subtitle says
what the run was (chain fingerprint, N, T).  Which keys get a figure, and their axis labels, come
from the results registry (:mod:`dllm_lit.results.registry`).  Figures are written as PNG, PDF
and/or SVG.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

from dllm_lit.util.atomic import atomic_write  # noqa: E402
from dllm_lit.results import registry  # noqa: E402

__all__ = ["plot_metric", "plot_nfe_front", "plot_kl_bracket", "plot_forward_kl", "write_figures", "run_caption", "save_figure",
           "finish_figure", "label_of"]

REFERENCE_LABEL = "ar"


def label_of(row: dict[str, Any]) -> str:
    """A row's label (version-1 rows have only ``sampler``)."""
    return str(row.get("label") or row.get("sampler"))


def run_caption(meta: dict[str, Any] | None) -> str:
    """``chain 1a2b3c4d (V=27), N=512, T=1024, seed 123`` from a metrics.json ``meta`` block ('' if unknown)."""
    if not meta:
        return ""
    chain = meta.get("chain") or {}
    parts = []
    if chain.get("fingerprint"):
        parts.append(f"chain {str(chain['fingerprint'])[:8]}" + (f" (V={chain['vocab_size']})" if chain.get("vocab_size") else ""))
    for key, name in (("num_sequences", "N"), ("seq_len", "T")):
        if meta.get(key) is not None:
            parts.append(f"{name}={meta[key]}")
    if meta.get("seed") is not None:
        parts.append(f"seed {meta['seed']}")
    return ", ".join(parts)


def save_figure(fig, path: Path, formats: Iterable[str] = ("png",)) -> list[Path]:
    """Write ``fig`` as ``path`` with each suffix in ``formats`` (atomically); closes it."""
    out = []
    try:
        for fmt in formats:
            target = Path(path).with_suffix(f".{fmt}")
            atomic_write(target, lambda fh, fmt=fmt: fig.savefig(fh, format=fmt))
            out.append(target)
    finally:
        plt.close(fig)
    return out


#: longest legend entry (a row label can be long: every non-default option); the full label is in metrics.json
LEGEND_CHARS = 44


def _legend_text(text: str) -> str:
    """``text`` cut to :data:`LEGEND_CHARS` (keeping a ``: suffix`` such as ``: plug-in KL``) so legends fit."""
    if len(text) <= LEGEND_CHARS:
        return text
    head, sep, tail = text.rpartition(": ")
    if not sep or len(tail) > 30:
        head, tail, sep = text, "", ""
    room = LEGEND_CHARS - len(sep) - len(tail) - 3
    return head[:room] + "..." + sep + tail


def finish_figure(fig, ax, path: Path, formats: Iterable[str], caption: str = "", legend_outside: bool = False) -> list[Path]:
    """Grid, legend (inside, or right of the axes with ``legend_outside``) and the run caption (bottom right),
    then :func:`save_figure`."""
    if caption:
        fig.text(0.99, 0.005, caption, fontsize=6, ha="right", va="bottom", color="0.35")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    labels = [_legend_text(t) for t in labels]
    if legend_outside:
        ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    else:
        ax.legend(handles, labels, fontsize=7)
    fig.tight_layout(rect=(0, 0.03 if caption else 0, 1, 1))
    return save_figure(fig, path, formats)


def _steps_axis(ax, values: Sequence[float]) -> None:
    """log2 axis with plain integer tick labels at the values drawn."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(values))
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}" for t in ticks], fontsize=7)


def _band(ax, xs, cis, color) -> None:
    if cis and all(ci is not None for ci in cis):
        ax.fill_between(xs, [c[0] for c in cis], [c[1] for c in cis], color=color, alpha=0.2, lw=0)


def _series(rows: list[dict[str, Any]], key: str, x: str) -> dict[str, list[dict[str, Any]]]:
    """Rows with both ``key`` and ``x`` set, grouped by row label, each group sorted by ``x``."""
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get(x) is not None and r.get(key) is not None:
            series[label_of(r)].append(r)
    return {name: sorted(rs, key=lambda r: r[x]) for name, rs in series.items()}


def plot_metric(rows: list[dict[str, Any]], key: str, path: Path, title: str | None = None,
                formats: Iterable[str] = ("png",), caption: str = "") -> list[Path]:
    """Plot ``key`` against steps, one line per row label; rows without steps as horizontal lines.

    Returns the files written (``path`` with each suffix of ``formats``).
    """
    label = registry.labels().get(key, key)
    series = _series(rows, key, "steps")
    flat = [r for r in rows if r.get("steps") is None and r.get(key) is not None]
    fig, ax = plt.subplots(figsize=(5.4, 3.8), dpi=120)
    if series:
        all_steps = []
        for name, rs in sorted(series.items()):
            xs = [r["steps"] for r in rs]
            all_steps += xs
            (line,) = ax.plot(xs, [r[key] for r in rs], marker="o", ms=3, label=name)
            _band(ax, xs, [r.get(f"{key}_ci") for r in rs], line.get_color())
        seen = set()
        for r in flat:
            name = label_of(r)
            if name in seen:
                continue
            seen.add(name)
            ref = name == REFERENCE_LABEL
            ax.axhline(r[key], color="black" if ref else None, ls="--" if ref else ":", lw=1,
                       label="AR (exact chain samples)" if ref else name)
            ci = r.get(f"{key}_ci")
            if ci is not None and ref:
                ax.axhspan(ci[0], ci[1], color="black", alpha=0.08, lw=0)
        _steps_axis(ax, all_steps)
        ax.set_xlabel("sampling steps")
    else:  # rows without steps only (e.g. configs/ar.yaml): one point per row with its interval
        names = list(dict.fromkeys(label_of(r) for r in flat))
        for i, name in enumerate(names):
            r = next(r for r in flat if label_of(r) == name)
            ci = r.get(f"{key}_ci")
            (pt,) = ax.plot([i], [r[key]], "o", color="black" if name == REFERENCE_LABEL else None, label=name)
            if ci is not None:  # the interval need not contain the plug-in value: drawn as a bar of its own
                ax.vlines(i, ci[0], ci[1], color=pt.get_color(), lw=2, alpha=0.4)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=7, rotation=20)
        ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(label)
    if title:
        ax.set_title(title, fontsize=9)
    return finish_figure(fig, ax, path, formats, caption)


def plot_nfe_front(rows: list[dict[str, Any]], key: str, path: Path, formats: Iterable[str] = ("png",),
                   caption: str = "") -> list[Path]:
    """``key`` against the mean NFE per sequence (horizontal bars: the NFE spread), one line per row label."""
    label = registry.labels().get(key, key)
    series = _series(rows, key, "nfe")
    fig, ax = plt.subplots(figsize=(5.4, 3.8), dpi=120)
    xs_all = []
    for name, rs in sorted(series.items()):
        xs = [r["nfe"] for r in rs]
        xs_all += xs
        (line,) = ax.plot(xs, [r[key] for r in rs], marker="o", ms=3, label=name)
        spread = [r.get("nfe_std") or 0.0 for r in rs]
        if any(spread):
            ax.errorbar(xs, [r[key] for r in rs], xerr=spread, fmt="none", ecolor=line.get_color(), alpha=0.6)
    ref = next((r for r in rows if label_of(r) == REFERENCE_LABEL and r.get(key) is not None), None)
    if ref is not None:
        ax.axhline(ref[key], color="black", ls="--", lw=1, label="AR (exact chain samples)")
    if xs_all and min(xs_all) > 0:  # ticks at the powers of two nearest the NFE values
        _steps_axis(ax, [2 ** round(math.log2(x)) for x in xs_all])
    ax.set_xlabel("denoiser evaluations per sequence (NFE)")
    ax.set_ylabel(label)
    return finish_figure(fig, ax, path, formats, caption)


def plot_kl_bracket(rows: list[dict[str, Any]], path: Path, formats: Iterable[str] = ("png",),
                    caption: str = "") -> list[Path]:
    """Per row label against steps: the plug-in transition KL (dotted), the floor-corrected KL
    ``kl_excess`` (solid) and the per-token sequence-KL bracket [``seq_kl_lower``, ``seq_kl_upper``]
    (band from max(0, lower), upper end dashed).  Symlog y axis (floor-corrected values can be negative).
    Nothing is drawn when no row has the floor-corrected columns."""
    series = _series(rows, "kl_excess", "steps")
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(8.4, 4.0), dpi=120)
    all_steps, drawn = [], []
    for name, rs in sorted(series.items()):
        xs = [r["steps"] for r in rs]
        all_steps += xs
        drawn += [r[k] for r in rs for k in ("kl_excess", "kl", "seq_kl_lower", "seq_kl_upper") if r.get(k) is not None]
        (line,) = ax.plot(xs, [r["kl_excess"] for r in rs], marker="o", ms=3, label=f"{name}: KL - exact floor")
        color = line.get_color()
        ax.plot(xs, [r["kl"] for r in rs], ls=":", color=color, lw=1, label=f"{name}: plug-in KL")
        if all(r.get("seq_kl_upper") is not None for r in rs):
            # the KL is >= 0; in an HMM world there is no first-order lower end (None): the band starts at 0
            lo, hi = [max(0.0, r["seq_kl_lower"] or 0.0) for r in rs], [r["seq_kl_upper"] for r in rs]
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
            ax.plot(xs, hi, ls="--", color=color, lw=1, label=f"{name}: sequence KL/token bracket")
        else:
            ax.plot(xs, [r["seq_kl_lower"] for r in rs], ls="-.", color=color, lw=1,
                    label=f"{name}: sequence KL/token lower end")
    ref = next((r for r in rows if label_of(r) == REFERENCE_LABEL and r.get("kl") is not None), None)
    if ref is not None:
        ax.axhline(ref["kl"], color="black", ls="--", lw=1, label="exact samples: plug-in KL (floor)")
    if ref is not None:
        drawn.append(ref["kl"])
    _steps_axis(ax, all_steps)
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.axhline(0.0, color="grey", lw=0.5)
    # the drawn values and no more: room above the largest (no clipped top) and a negative region only as deep
    # as the most negative floor-corrected value (none when every value is >= 0)
    low, high = min(drawn + [0.0]), max(drawn + [1e-4])
    ax.set_ylim(low * 2.0 if low < 0 else 0.0, high * 2.0)
    ax.set_xlabel("sampling steps")
    ax.set_ylabel("nats (per transition / per token)")
    return finish_figure(fig, ax, path, formats, caption, legend_outside=True)


def plot_forward_kl(rows: list[dict[str, Any]], path: Path, x: str = "steps", formats: Iterable[str] = ("png",),
                    caption: str = "") -> list[Path]:
    """Per row label against ``x`` ("steps" or "nfe"): the measured forward KL ``seq_kl_fwd`` (solid, with its
    interval band) and, where the random-order theory applies, its exact prediction ``seq_kl_fwd_theory``
    (dashed, same colour) and its TC / DTC / full-conditional bounds ``seq_kl_fwd_bound_*`` (dotted / dash-dotted
    / dash-dot-dotted, thin; fixed round sizes only).  Log y axis (values below 1e-12 are left out).  Nothing is
    drawn without the column."""
    series = {n: [r for r in rs if r["seq_kl_fwd"] > 1e-12] for n, rs in _series(rows, "seq_kl_fwd", x).items()}
    series = {n: rs for n, rs in series.items() if rs}
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=120)
    xs_all = []
    for name, rs in sorted(series.items()):
        xs = [r[x] for r in rs]
        xs_all += xs
        (line,) = ax.plot(xs, [r["seq_kl_fwd"] for r in rs], marker="o", ms=3, label=f"{name}: measured")
        _band(ax, xs, [r.get("seq_kl_fwd_ci") for r in rs], line.get_color())
        th = [(r[x], r["seq_kl_fwd_theory"]) for r in rs if (r.get("seq_kl_fwd_theory") or 0) > 1e-12]
        if th:
            ax.plot(*zip(*th), ls="--", color=line.get_color(), lw=1.2, label=f"{name}: theory (exact)")
        for bound, ls in _BOUND_STYLES.items():
            pts = [(r[x], r[f"seq_kl_fwd_bound_{bound}"]) for r in rs if (r.get(f"seq_kl_fwd_bound_{bound}") or 0) > 1e-12]
            if pts:
                ax.plot(*zip(*pts), ls=ls, color=line.get_color(), lw=0.9, alpha=0.7, label=f"{name}: {bound.upper()} bound")
    _steps_axis(ax, xs_all if x == "steps" else [2 ** round(math.log2(v)) for v in xs_all])
    ax.set_yscale("log")
    ax.set_xlabel("sampling steps" if x == "steps" else "denoiser evaluations per sequence (NFE)")
    ax.set_ylabel(registry.labels().get("seq_kl_fwd", "seq_kl_fwd"))
    return finish_figure(fig, ax, path, formats, caption, legend_outside=True)


#: line styles of the forward-KL bounds (docs/theory.md)
_BOUND_STYLES = {"tc": ":", "dtc": "-.", "mi": (0, (4, 1, 1, 1, 1, 1))}


def write_figures(rows: list[dict[str, Any]], out_dir: Path, keys: tuple[str, ...] | None = None,
                  formats: Iterable[str] = ("png",), meta: dict[str, Any] | None = None) -> list[Path]:
    """``<out_dir>/figures/<key>_vs_steps.<fmt>`` per metric key present in ``rows`` (default: the
    registry's figure keys), plus ``kl_vs_nfe`` / ``kl_excess_vs_nfe`` when rows carry NFE values and the
    ``kl_bracket_vs_steps`` figure when rows carry the floor-corrected columns."""
    formats = tuple(formats)
    caption = run_caption(meta)
    paths: list[Path] = []
    for key in registry.figure_keys() if keys is None else keys:
        if any(r.get(key) is not None for r in rows):
            paths += plot_metric(rows, key, Path(out_dir) / "figures" / f"{key}_vs_steps", formats=formats,
                                 caption=caption)
    for key in ("kl", "kl_excess"):  # the speed-quality front, plug-in and floor-corrected
        if any(r.get("nfe") is not None and r.get(key) is not None for r in rows):
            paths += plot_nfe_front(rows, key, Path(out_dir) / "figures" / f"{key}_vs_nfe", formats=formats,
                                    caption=caption)
    if keys is None:
        paths += plot_kl_bracket(rows, Path(out_dir) / "figures" / "kl_bracket_vs_steps", formats=formats,
                                 caption=caption)
        for x in ("steps", "nfe"):  # forward KL, measured and predicted (docs/theory.md)
            paths += plot_forward_kl(rows, Path(out_dir) / "figures" / f"seq_kl_fwd_vs_{x}", x, formats, caption)
    return paths
