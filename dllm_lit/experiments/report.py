"""Aggregate finished runs into the paper's tables and figures: ``python cli.py report RUN_DIRS... --out DIR``.

Every ``metrics.json`` under the given folders (searched recursively; a file may be named directly)
is read.  Runs are combined only when they share the chain (fingerprint), N and T: otherwise the
command stops and lists the groups, or with ``--group`` writes one report per group into
``DIR/<chain>-N<n>-T<t>/``.  Rows are identified by (label, steps, seed); the same row found in two
runs (e.g. the reference row every point of a sweep writes) is kept once.

Written into ``--out``:

- ``tables/results.md`` and ``tables/results.tex``: one row per label x steps, every metric of the
  results registry present, as ``value [low, high]`` (the bootstrap interval; over several seeds the
  mean and the range of the seeds' values), with the NFE per sequence (mean +- sd);
- ``figures/<key>_vs_steps.<fmt>``: the overview (transition KL, NLL, entropy, 3-gram diversity
  and whatever else the registry draws) against steps, one line per label, the reference row dashed;
- ``figures/kl_vs_nfe.<fmt>``: KL against the denoiser evaluations per sequence, every sampler;
- ``figures/<class>_<option>_<key>.<fmt>``: one figure per option that varies between rows of one
  sampler class (SEDD beta, AR beta with GenPPL, ReMDM top_p, LLaDA prompt_mode, ...), the metric
  against the option's value, one line per steps value;
- ``report.md``: the runs that went in, the tables and links to the figures;
- ``rows.json``: the combined rows.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path
from typing import Any

from dllm_lit.util.atomic import atomic_write_text

__all__ = ["collect_runs", "group_runs", "group_names", "combine_rows", "aggregate_seeds", "markdown_table", "theory_table",
           "latex_table", "varying_options", "write_report", "main"]

#: extra keys (beyond the registry's figure keys) drawn in option-sweep figures when present
SWEEP_KEYS = ("genppl", "mauve")


class MixedRunsError(ValueError):
    """Runs with different chains, N or T were asked to be combined."""


def collect_runs(paths: list[str | Path]) -> list[dict[str, Any]]:
    """``[{"path", "meta", "rows"}]`` for every metrics.json found under ``paths`` (a missing path is refused
    before torch loads)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
        elif (p / "metrics.json").is_file():
            files.append(p / "metrics.json")
        elif p.is_dir():
            files += sorted(p.rglob("metrics.json"))
        else:
            raise FileNotFoundError(f"run folder not found: {p}")
    if not files:
        raise FileNotFoundError(f"no metrics.json under {', '.join(map(str, paths))}")
    from dllm_lit.results.files import load_metrics

    runs = []
    for f in dict.fromkeys(files):
        meta, rows = load_metrics(f)
        runs.append({"path": f.parent, "meta": meta, "rows": rows})
    return runs


def run_group(meta: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(chain fingerprint, N, T) of a run; (None, None, None) for a version-1 file without metadata."""
    return ((meta.get("chain") or {}).get("fingerprint"), meta.get("num_sequences"), meta.get("seq_len"))


def group_name(key: tuple[Any, Any, Any]) -> str:
    fp, n, t = key
    return "unknown-run" if fp is None else f"{str(fp)[:8]}-N{n}-T{t}"


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping flattened to ``{"init_args.rho": 0.9, ...}``."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def group_names(groups: "OrderedDict[tuple, list[dict[str, Any]]]") -> dict[tuple, str]:
    """A folder name per group from what differs between the groups: the chain source's options (``rho=0.9``,
    the source class), N and T; the chain fingerprint only where nothing else tells two groups apart."""
    described = {}
    for key, rs in groups.items():
        meta = rs[0]["meta"]
        leaves = _leaves((meta.get("chain") or {}).get("source") or {})
        leaves = {k.rsplit(".", 1)[-1] if k.startswith("init_args.") else k: v for k, v in leaves.items()}
        leaves.update({"N": key[1], "T": key[2]})
        described[key] = leaves
    fields = dict.fromkeys(f for d in described.values() for f in d)
    differing = [f for f in fields if len({repr(d.get(f)) for d in described.values()}) > 1]
    names = {}
    for key, d in described.items():
        parts = [f"{f}{d.get(f)}" if f in ("N", "T") else
                 (str(d.get(f)).rsplit(".", 1)[-1] if f == "class_path" else f"{f}={d.get(f)}") for f in differing]
        names[key] = re.sub(r"[^\w.=+-]+", "_", "-".join(parts)) or group_name(key)
    counts = Counter(names.values())
    return {k: (f"{n}-{group_name(k)}" if counts[n] > 1 else n) for k, n in names.items()}


def group_runs(runs: list[dict[str, Any]]) -> "OrderedDict[tuple, list[dict[str, Any]]]":
    groups: OrderedDict[tuple, list[dict[str, Any]]] = OrderedDict()
    for run in runs:
        groups.setdefault(run_group(run["meta"]), []).append(run)
    return groups


def combine_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs' rows, each (label, steps, seed) once (first seen wins; a conflicting duplicate is warned about)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for run in runs:
        for r in run["rows"]:
            r = dict(r)
            r.setdefault("label", r.get("sampler"))
            key = (r["label"], r.get("steps"), r.get("seed"))
            if key in seen:
                if seen[key].get("kl") != r.get("kl") or seen[key].get("settings") != r.get("settings"):
                    warnings.warn(f"row {key} differs between runs; keeping the first ({seen[key]['_run']})",
                                  stacklevel=2)
                continue
            r["_run"] = str(run["path"])
            seen[key] = r
    return list(seen.values())


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def aggregate_seeds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (label, steps): a single seed as it is; several seeds as the mean, ``<key>_ci`` = the seeds' range."""
    groups: OrderedDict[tuple, list[dict[str, Any]]] = OrderedDict()
    for r in rows:
        groups.setdefault((r["label"], r.get("steps")), []).append(r)
    out = []
    for (label, steps), rs in groups.items():
        if len(rs) == 1:
            out.append({**rs[0], "seeds": [rs[0].get("seed")]})
            continue
        agg: dict[str, Any] = {"sampler": rs[0].get("sampler"), "label": label, "steps": steps,
                               "seeds": sorted(r.get("seed") for r in rs), "settings": rs[0].get("settings")}
        for k in rs[0]:
            if k.endswith("_ci") or k in agg or k in ("seed", "_run"):
                continue
            vals = [r.get(k) for r in rs]
            if all(_is_number(v) for v in vals):
                agg[k] = sum(vals) / len(vals)
                if k not in ("nfe", "nfe_std"):
                    agg[f"{k}_ci"] = [min(vals), max(vals)]
        out.append(agg)
    return out


def _order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = list(dict.fromkeys(r["label"] for r in rows))
    ref = [lab for lab in labels if lab == "ar"]
    rank = {lab: i for i, lab in enumerate(ref + [lab for lab in labels if lab not in ref])}
    return sorted(rows, key=lambda r: (rank[r["label"]], -1 if r.get("steps") is None else r["steps"]))


def table_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The registry's keys present in ``rows``, in registry order."""
    from dllm_lit.results import registry

    return [k for s in registry.METRICS for k in s.keys if any(_is_number(r.get(k)) for r in rows)]


def _num(v: Any, digits: int = 4) -> str:
    if not _is_number(v):
        return "–"
    v = float(v)
    return f"{v:.{digits}g}" if abs(v) < 1e4 else f"{v:.3e}"


def _cell(r: dict[str, Any], key: str) -> str:
    ci = r.get(f"{key}_ci")
    value = _num(r.get(key))
    if ci is None or value == "–":
        return value
    return f"{value} [{_num(ci[0])}, {_num(ci[1])}]"


def _nfe(r: dict[str, Any]) -> str:
    if not _is_number(r.get("nfe")):
        return "–"
    sd = r.get("nfe_std")
    return _num(r["nfe"], 5) + (f" ± {_num(sd, 3)}" if _is_number(sd) and sd > 0 else "")


def markdown_table(rows: list[dict[str, Any]], keys: list[str] | None = None) -> str:
    from dllm_lit.results import registry

    keys = table_keys(rows) if keys is None else keys
    labels = registry.labels()
    head = ["sampler", "steps", "NFE", *[labels.get(k, k) for k in keys]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in _order(rows):
        steps = "AR" if r.get("steps") is None else str(r["steps"])
        lines.append("| " + " | ".join([f"`{r['label']}`", steps, _nfe(r), *[_cell(r, k) for k in keys]]) + " |")
    return "\n".join(lines) + "\n"


def theory_table(rows: list[dict[str, Any]]) -> str:
    """Predicted against measured forward KL (``seq_kl_fwd_theory`` vs ``seq_kl_fwd`` with its interval) for the
    rows where the random-order theory applies, with the TC / DTC / full-conditional bounds on the prediction
    ('–' for coin-drawn rounds; docs/theory.md); '' when no row has a prediction."""
    rs = [r for r in _order(rows) if _is_number(r.get("seq_kl_fwd_theory")) and _is_number(r.get("seq_kl_fwd"))]
    if not rs:
        return ""
    lines = ["| sampler | steps | NFE | predicted | measured [interval] | inside | TC bound | DTC bound | MI bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        ci, th = r.get("seq_kl_fwd_ci"), float(r["seq_kl_fwd_theory"])
        inside = "–" if ci is None else ("yes" if ci[0] <= th <= ci[1] else "no")
        bounds = " | ".join(_num(float(r[k])) if _is_number(r.get(k)) else "–"
                            for k in ("seq_kl_fwd_bound_tc", "seq_kl_fwd_bound_dtc", "seq_kl_fwd_bound_mi"))
        lines.append(f"| `{r['label']}` | {r.get('steps')} | {_nfe(r)} | {_num(th)} | {_cell(r, 'seq_kl_fwd')} | {inside} | "
                     f"{bounds} |")
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("[", "{[}"), ("]", "{]}"), ("±", r"$\pm$"), ("–", "--")):
        text = text.replace(a, b)
    return text


#: the LaTeX table's columns (those present): the paper's main metrics, so the table fits a page as written;
#: every metric is in the Markdown table and rows.json
LATEX_KEYS = ("nll", "kl", "kl_excess", "tv", "entropy", "div3", "genppl", "mauve")


def latex_table(rows: list[dict[str, Any]], keys: list[str] | None = None, caption: str = "") -> str:
    """A ``table*`` of the :data:`LATEX_KEYS` columns, scaled to the text width (usable in a paper unedited)."""
    from dllm_lit.results import registry

    present = table_keys(rows)
    keys = [k for k in LATEX_KEYS if k in present] if keys is None else keys
    labels = registry.labels()
    head = ["sampler", "steps", "NFE", *[labels.get(k, k) for k in keys]]
    out = [r"\begin{table*}[t]", r"\centering", r"\scriptsize", r"\resizebox{\textwidth}{!}{%",
           r"\begin{tabular}{ll" + "r" * (len(head) - 2) + "}",
           r"\toprule", " & ".join(_tex(h) for h in head) + r" \\", r"\midrule"]
    prev = None
    for r in _order(rows):
        if prev is not None and r["label"] != prev:
            out.append(r"\midrule")
        prev = r["label"]
        steps = "AR" if r.get("steps") is None else str(r["steps"])
        cells = [_tex(r["label"]), steps, _tex(_nfe(r)), *[_tex(_cell(r, k)) for k in keys]]
        out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}}"]
    if caption:
        out.append(r"\caption{" + _tex(caption) + "}")
    out.append(r"\end{table*}")
    return "\n".join(out) + "\n"


def _interval_methods(runs: list[dict[str, Any]]) -> str:
    """``centred: kl, tv; percentile: nll`` from the runs' ``meta.intervals.per_key`` (the method each column used)."""
    by_method: dict[str, list[str]] = defaultdict(list)
    for r in runs:
        for key, m in ((r["meta"].get("intervals") or {}).get("per_key") or {}).items():
            method = (m.get("method") if isinstance(m, dict) else m) or "none"
            if key not in by_method[method]:
                by_method[method].append(key)
    return "; ".join(f"{method}: {', '.join(keys)}" for method, keys in by_method.items()) or "none recorded"


def varying_options(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """``{class: {option: [values...]}}`` for options that take several values among a sampler class's rows."""
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        s = r.get("settings")
        if isinstance(s, dict) and s.get("class"):
            by_class[s["class"]].append(s)
    out: dict[str, dict[str, list[Any]]] = {}
    for cls, settings in by_class.items():
        keys = [k for k in settings[0] if k not in ("class", "denoiser", "chain", "code")]
        varying: dict[str, list[Any]] = {}
        for k in keys:
            values = list(dict.fromkeys(json.dumps(s.get(k), sort_keys=True) for s in settings))
            if len(values) < 2:
                continue
            # an option that only follows an earlier one (ReMDM's eta with its variant) gets no figure of its own
            if any(len(_pairs(settings, j, k)) == len(values) == len(varying[j]) for j in varying):
                continue
            varying[k] = [json.loads(v) for v in values]
        if varying:
            out[cls] = varying
    return out


def _pairs(settings: list[dict[str, Any]], a: str, b: str) -> set[tuple[str, str]]:
    return {(json.dumps(s.get(a), sort_keys=True), json.dumps(s.get(b), sort_keys=True)) for s in settings}


def plot_option_sweep(rows: list[dict[str, Any]], cls: str, option: str, key: str, path: Path,
                      formats: tuple[str, ...], caption: str, others: list[str]) -> list[Path]:
    """``key`` against the value of ``option`` over the rows of sampler class ``cls``, one line per steps."""
    import matplotlib.pyplot as plt

    from dllm_lit.results import registry
    from dllm_lit.results.figures import finish_figure

    rs = [r for r in rows if (r.get("settings") or {}).get("class") == cls and _is_number(r.get(key))]
    values = list(dict.fromkeys(json.dumps(r["settings"].get(option), sort_keys=True) for r in rs))
    decoded = [json.loads(v) for v in values]
    numeric = all(_is_number(v) for v in decoded)
    order = sorted(range(len(decoded)), key=lambda i: decoded[i]) if numeric else list(range(len(decoded)))
    xpos = {values[i]: (decoded[i] if numeric else j) for j, i in enumerate(order)}
    lines: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    for r in rs:
        extra = ",".join(f"{o}={r['settings'].get(o)}" for o in others)
        name = ("AR" if r.get("steps") is None else f"steps={r['steps']}") + (f" ({extra})" if extra else "")
        lines[name].append((xpos[json.dumps(r["settings"].get(option), sort_keys=True)], r))
    fig, ax = plt.subplots(figsize=(5.4, 3.8), dpi=120)
    for name, pts in sorted(lines.items(), key=lambda kv: (len(kv[0]), kv[0])):
        pts.sort(key=lambda p: p[0])
        xs = [p[0] for p in pts]
        ys = [p[1][key] for p in pts]
        cis = [p[1].get(f"{key}_ci") for p in pts]
        (line,) = ax.plot(xs, ys, marker="o", ms=3, label=name)
        if all(ci is not None for ci in cis) and len(xs) > 1:
            ax.fill_between(xs, [c[0] for c in cis], [c[1] for c in cis], color=line.get_color(), alpha=0.15, lw=0)
    if not numeric:
        ax.set_xticks([xpos[values[i]] for i in order])
        ax.set_xticklabels([str(decoded[i]) for i in order], fontsize=7)
    ax.set_xlabel(f"{cls} {option}")
    ax.set_ylabel(registry.labels().get(key, key))
    return finish_figure(fig, ax, path, formats, caption)


def write_report(runs: list[dict[str, Any]], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Tables, figures, ``report.md`` and ``rows.json`` for runs of one (chain, N, T) group; returns the files."""
    from dllm_lit.results import registry
    from dllm_lit.results.figures import run_caption, write_figures

    out = Path(out)
    rows = combine_rows(runs)
    table = aggregate_seeds(rows)
    meta = next((r["meta"] for r in runs if r["meta"]), {})
    seeds = sorted({r.get("seed") for r in rows if r.get("seed") is not None})
    caption_meta = {**meta, "seed": seeds[0] if len(seeds) == 1 else None}
    caption = run_caption(caption_meta) + (f", seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else "")
    files = [atomic_write_text(out / "rows.json", json.dumps(rows, indent=2) + "\n")]
    files.append(atomic_write_text(out / "tables" / "results.md", markdown_table(table)))
    files.append(atomic_write_text(out / "tables" / "results.tex", latex_table(table, caption=caption)))
    figures = write_figures(table, out, formats=formats, meta=caption_meta)
    sweep_keys = [k for k in (*registry.figure_keys(), *SWEEP_KEYS) if any(_is_number(r.get(k)) for r in table)]
    sweep_keys = list(dict.fromkeys(sweep_keys))
    for cls, options in varying_options(table).items():
        for option in options:
            others = [o for o in options if o != option]
            for key in sweep_keys:
                figures += plot_option_sweep(table, cls, option, key,
                                             out / "figures" / f"{cls.lower()}_{option}_{key}", formats, caption, others)
    files += figures
    lines = ["# Results", "", f"{caption}." if caption else "", "", "## Runs", "",
             "| folder | rows | complete | sampler settings | intervals | commit |", "|---|---|---|---|---|---|"]
    for r in runs:
        m = r["meta"]
        labels = ", ".join(dict.fromkeys(f"`{x.get('label', x.get('sampler'))}`" for x in r["rows"]))
        iv = m.get("intervals") or {}
        lines.append(f"| {r['path']} | {len(r['rows'])} ({labels}) | {m.get('complete', '?')} | "
                     f"{'see rows.json'} | {iv.get('resamples', '–')} resamples, {iv.get('confidence', '–')} | "
                     f"{(m.get('package') or {}).get('commit', '–')} |")
    lines += ["", "## Table", "", "Values with their bootstrap interval "
              + ("(over several seeds: the mean, and the range of the seeds' values)" if len(seeds) > 1 else "")
              + f"; interval methods as the runs recorded them ({_interval_methods(runs)}; docs/metrics.md); "
              "NFE = denoiser evaluations per sequence (mean ± sd).", "", markdown_table(table),
              "LaTeX: `tables/results.tex`.", ""]
    theory = theory_table(table)
    if theory:
        files.append(atomic_write_text(out / "tables" / "theory.md", theory))
        lines += ["## Theory against measurement", "", "E_order KL(chain || sampler | order) per token: the exact "
                  "prediction of the random-order theory and the measured forward KL with its interval "
                  "(docs/theory.md).", "", theory]
    lines += ["## Figures", ""]
    for f in figures:
        if f.suffix == ".png" or f.suffix == f".{formats[0]}":
            lines.append(f"![{f.stem}]({f.relative_to(out)})")
    files.append(atomic_write_text(out / "report.md", "\n".join(lines) + "\n"))
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cli.py report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders (searched recursively for metrics.json) or metrics.json files")
    ap.add_argument("--out", required=True, help="folder for the report")
    ap.add_argument("--group", action="store_true",
                    help="runs with different chains, N or T: one report per group (default: refuse)")
    ap.add_argument("--formats", default="png,pdf,svg", help="figure formats, comma separated: png, pdf, svg (default: all three)")
    ns = ap.parse_args(argv)
    formats = tuple(f.strip() for f in ns.formats.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad or not formats:
        print(f"error: --formats must be png, pdf and/or svg, got {ns.formats!r}", file=sys.stderr)
        return 2
    try:
        runs = collect_runs(ns.runs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    groups = group_runs(runs)
    out = Path(ns.out)
    if len(groups) > 1 and not ns.group:
        desc = "; ".join(f"{group_name(k)}: {', '.join(str(r['path']) for r in rs)}" for k, rs in groups.items())
        print(f"error: the runs have different chains, N or T and are not combined ({desc}); "
              "pass --group for one report per group, or name runs of one group", file=sys.stderr)
        return 2
    names = group_names(groups)
    for key, rs in groups.items():
        target = out / names[key] if len(groups) > 1 else out
        files = write_report(rs, target, formats)
        print(f"{names[key]} ({group_name(key)}): {len(rs)} run(s) -> {target} ({len(files)} files)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
