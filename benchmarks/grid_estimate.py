"""Estimate a grid too long to run on a shared machine: time its parts at small N, check linearity, extrapolate.

    python benchmarks/grid_estimate.py --synthetic --all              # OWT-sized chain, every config of grid.py --all
    python benchmarks/grid_estimate.py --synthetic --configs configs/llada.yaml --small-n 16 32 --jobs 2

A :mod:`grid` work unit costs (i) sampling: the sampler's ``generate_with_stats`` for N sequences, the very call
the engine's ``predict_step`` makes, per row (config x step count); (ii) the metrics of each row (the results
writer's ``finish``: transition metrics, the certified DV bound, ...), whose cost at V = 4096 is dominated by
the DV normaliser's transfer-matrix products and hardly depends on N; (iii) a fixed set-up per unit (the CLI
parser, the Trainer).  Measured here:

* sampling of every (config, step count) at the two ``--small-n`` sizes (same seed, T, chain and oracle as the
  grid), fitted by the line through both, c(N) = a + b N, and extrapolated to ``--target-n``; the ratio
  c(N2) / c(N1) is printed per config (N2 / N1 when the cost is proportional to N, 1 when fixed).  Sequences are
  independent (every draw depends only on (seed, index)); what is shared across a batch (one posterior row per
  distinct neighbourhood) grows more slowly than N, so where the ratio is below N2 / N1 the line is an upper end;
* (ii) and (iii) on the exact AR config's unit at the small sizes *and* at ``--target-n`` itself (one row, the
  sampling there is negligible): metrics s / row and set-up s / unit, applied to every row and unit.

The whole grid's wall time with ``--jobs J`` is estimated by scheduling the estimated units as :mod:`grid` does
(largest first, each to the first free worker) with a full core per worker.  CPU (process) seconds are the figure
to quote on a machine shared with other jobs; ``--jobs`` here only spreads the measurements over processes.
"""
from __future__ import annotations

import argparse
import heapq
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/grid.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's dllm_lit, also when another is installed
import grid  # noqa: E402


def fit(n1: int, c1: float, n2: int, c2: float, target: int) -> float:
    """c(target) on the line through (n1, c1), (n2, c2); a negative slope (noise) counts as c2 scaled by target / n2."""
    slope = (c2 - c1) / (n2 - n1)
    return c2 * target / n2 if slope < 0 else c1 + slope * (target - n1)


def schedule(costs: list[float], jobs: int) -> float:
    """Makespan of ``costs`` run largest first, each on the first worker to become free (grid.py's order)."""
    free = [0.0] * jobs
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def _unit_args(args: argparse.Namespace, n: int) -> argparse.Namespace:
    return argparse.Namespace(num_sequences=n, seq_len=args.seq_len, chunk_size=512, seed=args.seed,
                              synthetic=args.synthetic, data_config=None, accelerator="cpu", direct=False)


def _shared(args: argparse.Namespace):
    """(chain, oracle) of this process, built by grid.run_unit's first call (the AR unit, cheap)."""
    if "chain" not in grid._SHARED:
        grid.run_unit(str(grid.ROOT / "configs" / "ar.yaml"), [], _unit_args(args, 4))
    return grid._SHARED["chain"], grid._SHARED["oracle"]


def sampling_cpu(config: str, steps: int | None, args: argparse.Namespace) -> tuple[str, int | None, list[float]]:
    """CPU seconds of one row's sampling (``generate_with_stats`` over N sequences) at each of ``args.small_n``."""
    import torch

    torch.set_num_threads(1)  # as the CLI samples
    chain, oracle = _shared(args)
    cli = grid.build(config, _unit_args(args, args.small_n[0]), "/tmp", [steps] if steps else [])
    model = cli.model
    if model.requires_denoiser and model.denoiser is None:
        model.denoiser = oracle
    model.connect(chain)
    out = []
    for n in args.small_n:
        idx = torch.arange(n)
        c0 = time.process_time()
        model.generate_with_stats(idx, args.seq_len, steps if steps else 1, args.seed)
        out.append(time.process_time() - c0)
    return model.name, steps, out


def metric_cpu(n: int, args: argparse.Namespace) -> tuple[int, float, float, float]:
    """(n, unit CPU s, metric CPU s, sampling CPU s) of the AR config's one-row unit at N = n."""
    from dllm_lit.results import accumulator
    _shared(args)
    spent = [0.0]
    cls = accumulator.MetricAccumulator
    orig = cls.finish

    def timed(self, *a, **k):
        c0 = time.process_time()
        try:
            return orig(self, *a, **k)
        finally:
            spent[0] += time.process_time() - c0

    cls.finish = timed
    try:
        _, _, cpu, _, _, _ = grid.run_unit(str(grid.ROOT / "configs" / "ar.yaml"), [], _unit_args(args, n))
    finally:
        cls.finish = orig
    _, _, ar = sampling_cpu(str(grid.ROOT / "configs" / "ar.yaml"), None,
                            argparse.Namespace(**{**vars(args), "small_n": [n]}))
    return n, cpu, spent[0], ar[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=None, help="config files (default: the paper's configs)")
    ap.add_argument("--all", action="store_true", help="every shipped sampler config (grid.py --all)")
    ap.add_argument("--steps", nargs="*", type=int, default=grid.STEPS)
    ap.add_argument("--small-n", nargs=2, type=int, default=[32, 64], help="the two small N of the sampling fit")
    ap.add_argument("--target-n", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--synthetic", action="store_true", help="OWT-sized synthetic chain instead of the English chain")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the measurements (one thread each)")
    ap.add_argument("--target-jobs", type=int, default=2, help="worker count of the estimated grid's wall time")
    args = ap.parse_args()
    n1, n2 = args.small_n
    if not 0 < n1 < n2:
        ap.error(f"--small-n must be two sizes 0 < N1 < N2, got {args.small_n}")
    if args.target_n < 1 or args.target_jobs < 1 or args.jobs < 1:
        ap.error("--target-n, --jobs and --target-jobs must be >= 1")
    names = grid.shipped_configs() if args.all else grid.PAPER_CONFIGS
    configs = args.configs or [str(grid.ROOT / "configs" / f"{c}.yaml") for c in names]
    rows = [(c, s) for c in configs for s in (args.steps if grid.has_steps(c) else [None])]
    rows.sort(key=lambda r: -(r[1] or 0))  # large step counts first: the slow ones start at once
    print(f"sampling at N={args.small_n}, metrics at N={sorted({n1, n2, args.target_n})} -> N={args.target_n}, "
          f"T={args.seq_len}, steps={args.steps}; {len(rows)} rows, {len(configs)} configs", flush=True)
    pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"))
    mfut = [pool.submit(metric_cpu, n, args) for n in sorted({n1, n2, args.target_n})]
    sfut = [pool.submit(sampling_cpu, c, s, args) for c, s in rows]
    metric: dict[int, tuple[float, float, float]] = {}
    for f in mfut:
        n, unit, m, ar = f.result()
        metric[n] = (unit, m, ar)
        print(f"  AR unit N={n}: {unit:.1f} s cpu, of which metrics {m:.1f} s, sampling {ar:.2f} s", flush=True)
    samp: dict[str, dict[int | None, list[float]]] = {}
    label: dict[str, str] = {}
    for (config, _), f in zip(rows, sfut):
        name, steps, cpu = f.result()
        label[config] = name
        samp.setdefault(config, {})[steps] = cpu
        print(f"  {name} steps={steps}: sampling {cpu[0]:.2f} / {cpu[1]:.2f} s cpu at N={n1} / {n2}", flush=True)
    pool.shutdown()
    per_row = metric[args.target_n][1]
    per_unit = max(0.0, metric[args.target_n][0] - metric[args.target_n][1] - metric[args.target_n][2])
    print()
    print(f"metrics {per_row:.1f} s CPU per row at N={args.target_n} (N={n1}: {metric[n1][1]:.1f}, N={n2}: "
          f"{metric[n2][1]:.1f}); set-up {per_unit:.1f} s per unit")
    print(f"CPU seconds per config: sampling at N={n1} / {n2} (ratio), sampling extrapolated to N={args.target_n}, "
          f"+ metrics and set-up = the config's estimate")
    head = f"{'config':>18s} {'rows':>4s} {'N=' + str(n1):>8s} {'N=' + str(n2):>8s} {'ratio':>5s} " \
           f"{'samp ' + str(args.target_n):>10s} {'estimate':>9s}"
    print(head)
    units, total = [], 0.0
    for config in configs:
        by = samp[config]
        c1, c2 = sum(v[0] for v in by.values()), sum(v[1] for v in by.values())
        ext = {s: fit(n1, v[0], n2, v[1], args.target_n) for s, v in by.items()}
        for unit_steps in [u for c, u in grid.work_units([config], args.steps)]:
            keys = unit_steps or [None]
            units.append(sum(ext[s] for s in keys) + per_row * len(keys) + per_unit)
        est = sum(ext.values()) + per_row * len(by) + per_unit * len(grid.work_units([config], args.steps))
        total += est
        print(f"{label[config]:>18s} {len(by):4d} {c1:8.1f} {c2:8.1f} {c2 / max(c1, 1e-9):5.2f} "
              f"{sum(ext.values()):10.0f} {est:9.0f}")
    span = schedule(units, args.target_jobs)
    print(f"estimated grid at N={args.target_n}: {total:.0f} s CPU; with --jobs {args.target_jobs} "
          f"(a full core per worker) {span:.0f} s = {span / 60:.1f} min wall; longest unit {max(units):.0f} s")


if __name__ == "__main__":
    main()
