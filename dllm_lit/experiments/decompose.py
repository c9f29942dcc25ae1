"""Split a learned denoiser's error from its sampler's error (one command, one table, one figure).

    python cli.py decompose --config configs/decompose.yaml     # or python -m dllm_lit.experiments.decompose

For a sampler whose ``denoiser`` is a learned model and the steps grid of that sampler:

(a) denoiser error: E KL(gamma || p_theta) over the masked positions of noised exact chain samples
    (gamma = the exact oracle posterior), per masking-ratio bin (10 bins of the sequence's masked
    fraction) and overall, with the unigram baseline KL(gamma || pi) alongside;
(b) sampler-only error: transition KL of the same sampler with the exact oracle;
(c) total error: transition KL of the sampler with the learned denoiser - same seed, same sequence
    indices, so every draw that does not depend on the denoiser is shared;

plus the paired difference (c) - (b) per steps value and the transition KL of exact chain samples
(the plug-in bias floor).  Intervals are bootstrap intervals over sequences: percentile intervals
for (a), *centred* intervals for the transition KLs (clipped at 0; the runs' method, ``docs/metrics.md``: they
always contain the estimate), paired for (c) - (b) (both rows resampled with the same sequence weights).  Writes ``decomposition.json``,
``decomposition.csv``, ``decomposition.md`` and ``decomposition.png`` into ``output_dir``.
"""
from __future__ import annotations

import copy
import csv
import json
import os
from pathlib import Path
from typing import Any, Optional

import torch

from dllm_lit.data.datamodule import MarkovDataModule
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.experiments.decompose_stats import DIFF_INTERVAL, KL_INTERVAL
from dllm_lit.experiments.decompose_stats import centred_interval as _centred
from dllm_lit.experiments.decompose_stats import transition_kl as _kl
from dllm_lit.metrics.functional.bootstrap import bootstrap_ci
from dllm_lit.metrics.functional.transition import transition_counts, transition_metrics_from_counts
from dllm_lit.samplers.base import Sampler
from dllm_lit.training.objective import masked_kl, noise

__all__ = ["decompose", "denoiser_error", "main", "NUM_BINS"]

NUM_BINS = 10
#: first sequence index of the denoiser-error evaluation set (disjoint from training, validation, predict)
EVAL_BASE = 3 * 2**40


@torch.no_grad()
def denoiser_error(denoiser, oracle, chain, num_sequences: int, seq_len: int, seed: int, batch_size: int = 64,
                   resamples: int = 200, device: torch.device | str = "cpu") -> dict[str, Any]:
    """(a): mean KL(gamma || p_theta) and KL(gamma || pi) over masked positions, per masked-fraction bin and overall."""
    M = chain.vocab_size
    log_pi = chain.stationary.log()
    kl_sum = torch.zeros(num_sequences, dtype=torch.float64)
    uni_sum = torch.zeros(num_sequences, dtype=torch.float64)
    count = torch.zeros(num_sequences, dtype=torch.float64)
    for start in range(0, num_sequences, batch_size):
        n = min(batch_size, num_sequences - start)
        idx = torch.arange(EVAL_BASE + start, EVAL_BASE + start + n)
        x = chain.sample(n, seq_len, seed=seed, start_index=int(idx[0])).to(device)
        z, _ = noise(x, idx.to(device), seed, M)
        b, p = nonzero_pairs(z == M)
        if b.numel() == 0:
            continue
        gamma = oracle.probs_at(z, b, p)
        kl = masked_kl(gamma, denoiser.log_probs_at(z, b, p)).cpu()
        uni = masked_kl(gamma, log_pi.to(gamma.device).expand(b.numel(), -1)).cpu()
        bc = b.cpu() + start
        kl_sum.index_add_(0, bc, kl)
        uni_sum.index_add_(0, bc, uni)
        count.index_add_(0, bc, torch.ones_like(kl))
    frac = count / seq_len
    bins = (frac * NUM_BINS).long().clamp(max=NUM_BINS - 1)

    def summary(sel: torch.Tensor, lo: float, hi: float) -> dict[str, Any]:
        k, u, c = kl_sum[sel], uni_sum[sel], count[sel]
        row: dict[str, Any] = {"mask_lo": lo, "mask_hi": hi, "sequences": int(sel.sum()), "positions": int(c.sum())}
        if c.sum() <= 0:
            return row | {"kl": None, "kl_ci": None, "kl_unigram": None, "kl_unigram_ci": None}
        for key, num in (("kl", k), ("kl_unigram", u)):
            row[key] = float(num.sum() / c.sum())
            keep = c > 0
            numk, ck = num[keep], c[keep]
            row[key + "_ci"] = (list(bootstrap_ci(lambda w, a=numk, d=ck: (w @ a) / (w @ d), int(keep.sum()),
                                                  num_resamples=resamples, seed=seed))
                                if int(keep.sum()) >= 2 else None)
        return row

    rows = [summary(bins == i, i / NUM_BINS, (i + 1) / NUM_BINS) for i in range(NUM_BINS)]
    return {"overall": summary(torch.ones(num_sequences, dtype=torch.bool), 0.0, 1.0), "bins": rows}


def decompose(sampler: Sampler, data: MarkovDataModule, output_dir: str | os.PathLike = "outputs/decomposition",
              denoiser_sequences: int = 512, bootstrap_resamples: int = 200, device: str = "auto",
              caches: list[dict[str, Any]] | None = None, law_permutations: int = 999) -> dict[str, Any]:
    """Compute (a), (b), (c) and (c) - (b) (see module docstring), write the table and figure; returns the table.
    With ``caches`` (cache settings of the learned denoiser) (b) and (c) come from the cache study instead
    (:mod:`dllm_lit.experiments.cache_study`: sampler, model and cache parts, per-call errors, speed, law tests)."""
    if sampler.denoiser is None:
        raise ValueError("decompose needs a learned denoiser: set sampler.init_args.denoiser "
                         "(e.g. dllm_lit.denoisers.CheckpointDenoiser)")
    if caches:
        from dllm_lit.experiments.cache_study import check_caches

        caches = check_caches(caches, sampler)
        if getattr(sampler.denoiser, "cache", "none") != "none":
            raise ValueError("decompose with caches: the sampler's denoiser must be the no-cache model (cache: none); "
                             "the caches list gives the cached variants")
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    chain = data.build_chain()
    N, T, seed = data.num_sequences, data.seq_len, data.seed
    learned = sampler.denoiser
    sampler.denoiser = None
    oracle_sampler = copy.deepcopy(sampler)  # same class and options, denoiser None: the exact oracle at connect
    sampler.denoiser = learned
    sampler.to(dev).connect(chain)
    learned.check_length(T)  # before anything runs or is written
    oracle_sampler.to(dev).connect(chain)

    part_a = denoiser_error(sampler.denoiser, oracle_sampler.denoiser, chain, denoiser_sequences, T, seed,
                            resamples=bootstrap_resamples, device=dev)
    reference = chain.sample(N, T, seed=seed, start_index=0)
    ref_kl = _kl(reference, chain)
    ref_ci = _centred(lambda w: _kl(reference, chain, w), N, bootstrap_resamples, seed)
    steps_rows = []
    study = None
    if caches:
        from dllm_lit.experiments.cache_study import cache_rows

        study = cache_rows(oracle_sampler, sampler, caches, chain, N, T, seed, bootstrap_resamples, law_permutations)
        for r in study:
            o, c = r["runs"]["oracle"], r["runs"]["learned"]
            steps_rows.append({"steps": r["steps"], "sampler_kl": o["kl"], "total_kl": c["kl"],
                               "diff_kl": c["kl"] - o["kl"], "sampler_kl_ci": o["kl_ci"], "total_kl_ci": c["kl_ci"],
                               "diff_kl_ci": next(iter(r["parts"].values()))["kl_model_ci"]})
    for steps in ([] if caches else sampler.steps_grid):
        xb = oracle_sampler.sample(N, T, steps, seed=seed).cpu()
        xc = sampler.sample(N, T, steps, seed=seed).cpu()
        row: dict[str, Any] = {"steps": steps, "sampler_kl": _kl(xb, chain), "total_kl": _kl(xc, chain)}
        row["diff_kl"] = row["total_kl"] - row["sampler_kl"]
        for key, fn, policy in (("sampler_kl", lambda w: _kl(xb, chain, w), KL_INTERVAL),
                                ("total_kl", lambda w: _kl(xc, chain, w), KL_INTERVAL),
                                ("diff_kl", lambda w: _kl(xc, chain, w) - _kl(xb, chain, w), DIFF_INTERVAL)):
            row[key + "_ci"] = _centred(fn, N, bootstrap_resamples, seed, policy)  # one seed: paired resamples
        steps_rows.append(row)
    table = {"sampler": sampler.name, "denoiser": sampler.denoiser.describe(),
             "num_sequences": N, "seq_len": T, "seed": seed, "denoiser_sequences": denoiser_sequences,
             "bootstrap_resamples": bootstrap_resamples, "reference_kl": ref_kl, "reference_kl_ci": list(ref_ci),
             "denoiser_error": part_a, "steps": steps_rows}
    if study is not None:
        table["cache_study"] = study
    write(table, Path(output_dir))
    return table


def _fmt(v: float | None, ci: list[float] | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")


def write(table: dict[str, Any], out: Path) -> None:
    """decomposition.json / .csv / .md / .png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "decomposition.json").write_text(json.dumps(table, indent=2))
    a = table["denoiser_error"]
    with open(out / "decomposition.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["part", "key", "value", "ci_low", "ci_high", "extra"])
        for r in [a["overall"]] + a["bins"]:
            key = f"mask[{r['mask_lo']:.1f},{r['mask_hi']:.1f})"
            for name in ("kl", "kl_unigram"):
                ci = r.get(name + "_ci") or [None, None]
                w.writerow(["a_denoiser_" + name, key, r.get(name), ci[0], ci[1], f"positions={r['positions']}"])
        for r in table["steps"]:
            for name, part in (("sampler_kl", "b_sampler"), ("total_kl", "c_total"), ("diff_kl", "c_minus_b")):
                w.writerow([part, f"steps={r['steps']}", r[name], r[name + "_ci"][0], r[name + "_ci"][1], ""])
        w.writerow(["reference", "ar", table["reference_kl"], *table["reference_kl_ci"], ""])
    lines = [f"# Error decomposition: {table['sampler']} with {table['denoiser'].get('denoiser')}",
             "", f"N = {table['num_sequences']}, T = {table['seq_len']}, seed = {table['seed']}; 95% bootstrap "
             f"intervals over sequences ({table['bootstrap_resamples']} resamples; centred intervals for transition KL, "
             "as in a run's metrics.json; (c) - (b) paired).", "",
             "## (a) denoiser error E KL(oracle posterior || p_theta), masked positions", "",
             "| masked fraction | positions | KL(gamma, p_theta) | KL(gamma, pi) (unigram) |", "| --- | --- | --- | --- |"]
    for r in [a["overall"]] + a["bins"]:
        label = "all" if r is a["overall"] else f"[{r['mask_lo']:.1f}, {r['mask_hi']:.1f})"
        lines.append(f"| {label} | {r['positions']} | {_fmt(r.get('kl'), r.get('kl_ci'))} | "
                     f"{_fmt(r.get('kl_unigram'), r.get('kl_unigram_ci'))} |")
    lines += ["", "## transition KL: (b) oracle + sampler, (c) learned + sampler, (c) - (b) paired", "",
              "| steps | (b) sampler only | (c) total | (c) - (b) |", "| --- | --- | --- | --- |"]
    for r in table["steps"]:
        lines.append(f"| {r['steps']} | {_fmt(r['sampler_kl'], r['sampler_kl_ci'])} | "
                     f"{_fmt(r['total_kl'], r['total_kl_ci'])} | {_fmt(r['diff_kl'], r['diff_kl_ci'])} |")
    lines += ["", f"Exact chain samples (plug-in floor): {_fmt(table['reference_kl'], table['reference_kl_ci'])}", ""]
    if "cache_study" in table:
        from dllm_lit.experiments.cache_report import cache_figure, cache_markdown

        lines += cache_markdown(table["cache_study"])
        cache_figure(table["cache_study"], out / "cache_front.png")
    (out / "decomposition.md").write_text("\n".join(lines))
    _figure(table, out / "decomposition.png")


def _figure(table: dict[str, Any], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    bins = [r for r in table["denoiser_error"]["bins"] if r.get("kl") is not None]
    mid = [(r["mask_lo"] + r["mask_hi"]) / 2 for r in bins]
    for key, label in (("kl", "learned denoiser"), ("kl_unigram", "unigram baseline")):
        y = [r[key] for r in bins]
        err = [[max(0.0, r[key] - r[key + "_ci"][0]) if r[key + "_ci"] else 0.0 for r in bins],
               [max(0.0, r[key + "_ci"][1] - r[key]) if r[key + "_ci"] else 0.0 for r in bins]]
        ax1.errorbar(mid, y, yerr=err, marker="o", capsize=3, label=label)
    ax1.set(xlabel="masked fraction", ylabel="KL(oracle posterior || denoiser) [nats]", title="(a) denoiser error")
    ax1.legend()
    steps = [r["steps"] for r in table["steps"]]
    for key, label in (("sampler_kl", "(b) oracle + sampler"), ("total_kl", "(c) learned + sampler")):
        y = [r[key] for r in table["steps"]]
        err = [[max(0.0, r[key] - r[key + "_ci"][0]) for r in table["steps"]],
               [max(0.0, r[key + "_ci"][1] - r[key]) for r in table["steps"]]]
        ax2.errorbar(steps, y, yerr=err, marker="o", capsize=3, label=label)
    ax2.axhline(table["reference_kl"], ls="--", color="k", label="exact chain samples")
    ax2.set(xscale="log", xlabel="steps", ylabel="transition KL [nats]", title=f"{table['sampler']}: (b) vs (c)")
    ax2.set_xticks(steps, [str(s) for s in steps])  # the step counts themselves, not 10^1, 10^2
    ax2.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: list[str] | None = None) -> dict[str, Any]:
    """``python cli.py decompose --config configs/decompose.yaml [--data.seq_len 64] ...`` (or ``python -m
    dllm_lit.experiments.decompose``)."""
    from dllm_lit.cli.config_classes import documented_class
    from dllm_lit.cli.lightning_cli import DEFAULT_SEED, DllmParser, exit_on_user_error

    # the CLI's parser: a bad option or a class that is not a sampler is refused in one line
    parser = DllmParser(prog="cli.py decompose", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="config")
    parser.add_subclass_arguments(Sampler, "sampler", required=True)
    parser.add_class_arguments(MarkovDataModule, "data")
    parser.add_argument("--output_dir", type=str, default="outputs/decomposition")
    parser.add_argument("--denoiser_sequences", type=int, default=512)
    parser.add_argument("--bootstrap_resamples", type=int, default=200)
    parser.add_argument("--device", type=str, default="auto")
    parser.add_argument("--caches", type=Optional[list[dict[str, Any]]], default=None,
                        help="cache settings of the learned denoiser to study, e.g. [{cache: dual, refresh_interval: 4}]")
    parser.add_argument("--law_permutations", type=int, default=999)
    parser.add_argument("--seed_everything", type=int, default=DEFAULT_SEED)

    def run() -> dict[str, Any]:
        cfg = parser.parse_args(args)
        documented_class(cfg.sampler.class_path, "sampler", "sampler.class_path")  # before anything is built
        if cfg.data.seed is None:
            cfg.data.seed = cfg.seed_everything
        init = parser.instantiate_classes(cfg)
        table = decompose(init.sampler, init.data, init.output_dir, init.denoiser_sequences, init.bootstrap_resamples,
                          init.device, init.caches, init.law_permutations)
        print(Path(init.output_dir, "decomposition.md").read_text())
        return table

    return exit_on_user_error(run)


if __name__ == "__main__":
    main()
