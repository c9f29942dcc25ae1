"""The cache study's table (markdown) and figure: cost against transition KL, one curve per cache policy.

``cache_front.png``: one panel per steps value; x = CPU seconds per sequence, y = transition KL; each policy's points
(one per refresh setting) joined in the order given; horizontal reference lines at the no-cache model's KL (solid) and
the oracle run's KL (dashed), a vertical line at the no-cache model's cost.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["cache_markdown", "cache_figure"]


def _ci(v: float, ci: list[float] | None, digits: int = 4) -> str:
    return f"{v:.{digits}f}" + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def cache_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per steps value, the runs (KL, NLL gap, per-call error, cost) and the parts per cache."""
    lines = ["## Cache study: sampler, model and cache error (common random numbers, paired 95% bootstrap intervals)",
             ""]
    for row in rows:
        lines += [f"### steps = {row['steps']}", "",
                  "| run | transition KL | NLL gap | per-call KL | top-1 | wall s/seq | CPU s/seq |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for label, r in row["runs"].items():
            ce = r.get("call_error")
            call = _ci(ce["kl"], ce.get("kl_ci")) if ce and ce.get("kl") is not None else "0 (exact)"
            top = f"{ce['top1']:.4f}" if ce and ce.get("top1") is not None else "1"
            lines.append(f"| {label} | {_ci(r['kl'], r['kl_ci'])} | {_ci(r['nll_gap'], r['nll_gap_ci'])} | {call} | "
                         f"{top} | {r['wall_per_seq']:.4f} | {r['cpu_per_seq']:.4f} |")
        if row["parts"]:
            lines += ["", "| cache | KL: sampler | model | cache | total | NLL gap: cache | law test TV (p) | CPU speed-up |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, p in row["parts"].items():
            faster = f"{p['speedup_cpu']:.2f}x" + ("" if p["speedup_cpu"] > 1 else " (not faster)")
            lines.append(f"| {label} | {_ci(p['kl_sampler'], p['kl_sampler_ci'])} | {_ci(p['kl_model'], p['kl_model_ci'])}"
                         f" | {_ci(p['kl_cache'], p['kl_cache_ci'])} | {_ci(p['kl_total'], p['kl_total_ci'])} | "
                         f"{_ci(p['nll_gap_cache'], p['nll_gap_cache_ci'])} | {p['law_test']['tv']:.4f} "
                         f"({p['law_test']['p_value']:.3f}) | {faster} |")
        lines.append("")
    return lines


def cache_figure(rows: list[dict[str, Any]], path: Path) -> None:
    """``cache_front.png`` (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.8), squeeze=False)
    for ax, row in zip(axes[0], rows):
        runs = row["runs"]
        policies: dict[str, list[tuple[float, float, str]]] = {}
        for label in row["parts"]:
            policy, _, rest = label.partition("/")
            policies.setdefault(policy, []).append((runs[label]["cpu_per_seq"], runs[label]["kl"], rest or "-"))
        for policy, pts in policies.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
            for x, y, tag in pts:
                ax.annotate(tag, (x, y), fontsize=7, textcoords="offset points", xytext=(3, 3))
        ax.axhline(runs["learned"]["kl"], color="k", lw=1, label="learned, no cache")
        ax.axvline(runs["learned"]["cpu_per_seq"], color="k", lw=0.6, ls=":")
        ax.axhline(runs["oracle"]["kl"], color="k", lw=1, ls="--", label="oracle")
        ax.set(xlabel="CPU s per sequence", ylabel="transition KL [nats]", title=f"steps = {row['steps']}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
