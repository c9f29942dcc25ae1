"""Report of a sweep over HMM worlds: ``python -m dllm_lit.experiments.world_sweep RUN_DIRS... --out DIR``.

Runs on different worlds (e.g. switching_chains at several rho) are combined by the world option that varies
(``--option``, default ``rho``; read from ``meta.chain.source.init_args``).  Written into ``--out``:

- ``figures/world_metrics_vs_<option>.<fmt>``: transition KL, 2-gram and 3-gram KL and the dependence-profile
  excess (each minus the exact-sample floor, with its interval) against the option, one line per
  (sampler label, steps);
- ``figures/exact_dependence_vs_<option>.<fmt>``: each world's exact I(X_i; X_{i+d}), d = 1..64;
- ``figures/dependence_<label>-steps<k>.<fmt>``: per (label, steps), the plug-in profile of its samples in every
  world against the exact curves (from each run's ``samples.pt``);
- ``world_sweep.md``: the table of those values.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from dllm_lit.util.atomic import atomic_write_text

__all__ = ["WORLD_KEYS", "collect", "main"]

WORLD_KEYS = ("kl_excess", "ngram_kl2_excess", "ngram_kl3_excess", "dep_excess")


def _source(meta: dict[str, Any]) -> dict[str, Any]:
    return ((meta.get("chain") or {}).get("source") or {})


def collect(paths: list[str], option: str) -> list[dict[str, Any]]:
    """[{"value", "meta", "rows", "path"}] for every run, ``value`` = the run's world option."""
    from dllm_lit.experiments.report import collect_runs

    out = []
    for run in collect_runs(paths):
        args = _source(run["meta"]).get("init_args") or {}
        if option not in args:
            raise ValueError(f"run {run['path']}: its world has no option {option!r} (source {_source(run['meta'])})")
        out.append({**run, "value": float(args[option])})
    return sorted(out, key=lambda r: r["value"])


def _world(meta: dict[str, Any]):
    from dllm_lit.cli.config_classes import instantiate

    return instantiate(_source(meta), "source", "meta.chain.source").build()  # a chain source class only


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--option", default="rho", help="the world option that varies between runs")
    ap.add_argument("--formats", nargs="*", default=["png"])
    ns = ap.parse_args(argv)
    from dllm_lit.metrics.dependence import empirical_profile
    from dllm_lit.metrics.functional.world import DEP_DISTANCES, exact_world_profile
    from dllm_lit.results.figures import finish_figure, plt

    try:
        runs = collect(ns.runs, ns.option)
        worlds: dict[float, Any] = {}  # built first: a source that is not a chain source is refused before any write
        for run in runs:
            if run["value"] not in worlds:
                worlds[run["value"]] = _world(run["meta"])
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(ns.out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    series: dict[tuple[str, Any], dict[float, dict[str, Any]]] = defaultdict(dict)
    samples: dict[tuple[str, Any], dict[float, torch.Tensor]] = defaultdict(dict)
    for run in runs:
        v = run["value"]
        saved = {}
        pt = Path(run["path"]).parent / "samples.pt" if Path(run["path"]).is_file() else Path(run["path"]) / "samples.pt"
        if pt.is_file():
            saved = {(r["label"], r["steps"]): r["samples"] for r in torch.load(pt, weights_only=True)["rows"]}
        for r in run["rows"]:
            if r.get("steps") is None:
                continue
            series[(r["label"], r["steps"])][v] = r
            if (r["label"], r["steps"]) in saved:
                samples[(r["label"], r["steps"])][v] = saved[(r["label"], r["steps"])]
    files: list[Path] = []
    fig, axes = plt.subplots(2, 2, figsize=(9, 7), dpi=120)
    for ax, key in zip(axes.flat, WORLD_KEYS):
        for (label, steps), by_v in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            xs = [v for v in sorted(by_v) if by_v[v].get(key) is not None]
            if not xs:
                continue
            ys = [by_v[v][key] for v in xs]
            (line,) = ax.plot(xs, ys, marker="o", ms=3, lw=1, label=f"{label} steps={steps}")
            cis = [by_v[v].get(f"{key}_ci") for v in xs]
            if all(c is not None for c in cis):
                ax.fill_between(xs, [c[0] for c in cis], [c[1] for c in cis], color=line.get_color(), alpha=0.15, lw=0)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xlabel(ns.option)
        ax.set_ylabel(key + " (nats)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    files += finish_figure(fig, axes.flat[-1], out / "figures" / f"world_metrics_vs_{ns.option}", ns.formats)
    fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=120)
    exact = {v: exact_world_profile(w) for v, w in worlds.items()}
    for v, curve in exact.items():
        ax.plot(range(1, curve.numel() + 1), curve.clamp_min(1e-12).tolist(), label=f"{ns.option} = {v:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("distance d")
    ax.set_ylabel("exact I(X_i; X_i+d) (nats)")
    files += finish_figure(fig, ax, out / "figures" / f"exact_dependence_vs_{ns.option}", ns.formats)
    for (label, steps), by_v in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=120)
        for v, x in sorted(by_v.items()):
            (line,) = ax.plot(range(1, exact[v].numel() + 1), exact[v].clamp_min(1e-12).tolist(), lw=1)
            est = empirical_profile(x.long(), worlds[v].vocab_size)
            ok = ~est.isnan()
            ax.plot([d for d, k in zip(DEP_DISTANCES, ok.tolist()) if k], est[ok].clamp_min(1e-12).tolist(),
                    marker="o", ms=3, ls="--", color=line.get_color(), label=f"{ns.option} = {v:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("distance d")
        ax.set_ylabel("I(X_i; X_i+d) (nats): exact solid, samples dashed")
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{label}-steps{steps}")
        files += finish_figure(fig, ax, out / "figures" / f"dependence_{safe}", ns.formats)
    head = f"| label | steps | {ns.option} | " + " | ".join(WORLD_KEYS) + " |"
    lines = [head, "|" + " --- |" * (3 + len(WORLD_KEYS))]
    for (label, steps), by_v in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for v in sorted(by_v):
            r = by_v[v]
            cells = []
            for k in WORLD_KEYS:
                ci = r.get(f"{k}_ci")
                cells.append("-" if r.get(k) is None else f"{r[k]:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""))
            lines.append(f"| {label} | {steps} | {v:g} | " + " | ".join(cells) + " |")
    text = "# World sweep\n\n" + "\n".join(lines) + "\n\n" + "\n".join(f"![{p.stem}](figures/{p.name})" for p in files
                                                                     if p.suffix == ".png") + "\n"
    atomic_write_text(out / "world_sweep.md", text)
    print(f"{len(runs)} run(s) -> {out} ({len(files)} figures)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
