"""Estimate a grid too long to run on a shared machine: run it at small N, check the cost is linear in N, extrapolate.

    python benchmarks/grid_estimate.py --synthetic --all                 # OWT-sized chain, every config, N = 32 and 64
    python benchmarks/grid_estimate.py --synthetic --configs configs/llada.yaml --small-n 16 32 --target-n 512

Every config runs as :mod:`grid` runs it (same parser, engine, work units, one thread, one process: ``--jobs 1``)
at each small N, full T and all step counts.  Per work unit the CPU (process) seconds c(N) are fitted by the line
through the two smallest-N points, c(N) = a + b N, and extrapolated to ``--target-n``; the ratio c(2N) / c(N)
(2 when the cost is proportional to N, 1 when fixed) is printed per config so that a non-linear one shows.
Work per sequence is independent of N (every draw depends only on (seed, sequence index)); what is shared
across a batch (one posterior row per distinct neighbourhood, cache set-up) makes the cost grow more slowly than
N, so the extrapolation is an upper end where the ratio is below 2.  The whole grid's wall time with
``--jobs J`` is estimated by scheduling the extrapolated units as :mod:`grid` does (largest first, each to the
first free worker), assuming every worker gets a full core.  CPU seconds are the figure to quote on a machine
shared with other jobs; wall seconds are printed too.
"""
from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/grid.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's dllm_lit, also when another is installed
import grid  # noqa: E402


def fit(ns: list[int], cpus: list[float], target: int) -> float:
    """c(target) from the line through the first two (N, CPU s) points (clamped at the larger measured value
    scaled by target / N when the fitted slope is negative: a measurement's noise, not a cost that shrinks)."""
    (n1, c1), (n2, c2) = (ns[0], cpus[0]), (ns[1], cpus[1])
    slope = (c2 - c1) / (n2 - n1)
    if slope < 0:
        return c2 * target / n2
    return c1 + slope * (target - n1)


def schedule(costs: list[float], jobs: int) -> float:
    """Makespan of ``costs`` run largest first, each on the first worker to become free (grid.py's order)."""
    free = [0.0] * jobs
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=None, help="config files (default: the paper's configs)")
    ap.add_argument("--all", action="store_true", help="the paper's configs plus every modern sampler's (grid.py --all)")
    ap.add_argument("--steps", nargs="*", type=int, default=grid.STEPS)
    ap.add_argument("--small-n", nargs=2, type=int, default=[32, 64], help="the two small N to run (N1 < N2)")
    ap.add_argument("--target-n", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--synthetic", action="store_true", help="OWT-sized synthetic chain instead of the English chain")
    ap.add_argument("--target-jobs", type=int, default=2, help="worker count of the extrapolated grid's wall estimate")
    args = ap.parse_args()
    n1, n2 = args.small_n
    if not 0 < n1 < n2:
        ap.error(f"--small-n must be two sizes 0 < N1 < N2, got {args.small_n}")
    if args.target_n < 1 or args.target_jobs < 1:
        ap.error("--target-n and --target-jobs must be >= 1")
    names = grid.PAPER_CONFIGS + (grid.MODERN_CONFIGS if args.all else [])
    configs = args.configs or [str(grid.ROOT / "configs" / f"{c}.yaml") for c in names]
    units = grid.work_units(configs, args.steps)
    run_args = argparse.Namespace(seq_len=args.seq_len, chunk_size=512, seed=args.seed,
                                  synthetic=args.synthetic, data_config=None, accelerator="cpu", direct=False)
    print(f"N={args.small_n} -> {args.target_n}, T={args.seq_len}, steps={args.steps}, one process, one thread; "
          f"{len(units)} work units per N", flush=True)
    cpu: dict[tuple[str, tuple[int, ...]], list[float]] = {}
    wall: dict[tuple[str, tuple[int, ...]], list[float]] = {}
    label: dict[str, str] = {}
    for n in (n1, n2):
        run_args.num_sequences = n
        for config, steps in units:
            name, w, c, _, setup, _ = grid.run_unit(config, steps, run_args)
            if setup:
                print(setup, flush=True)
            label[config] = name
            cpu.setdefault((config, tuple(steps)), []).append(c)
            wall.setdefault((config, tuple(steps)), []).append(w)
            print(f"  N={n} {name} steps={steps}: {w:.1f} s wall {c:.1f} s cpu", flush=True)

    extrap = {u: fit([n1, n2], cpu[u], args.target_n) for u in cpu}
    print()
    print(f"CPU seconds per config (all its units), N = {n1} / {n2}, ratio, extrapolated to N = {args.target_n}")
    print(f"{'config':>18s} {'N=' + str(n1):>9s} {'N=' + str(n2):>9s} {'ratio':>6s} {'N=' + str(args.target_n):>10s}"
          f" {'wall ' + str(n2):>10s}")
    totals = [0.0, 0.0, 0.0]
    for config in configs:
        keys = [u for u in cpu if u[0] == config]
        c1, c2 = sum(cpu[u][0] for u in keys), sum(cpu[u][1] for u in keys)
        e = sum(extrap[u] for u in keys)
        w2 = sum(wall[u][1] for u in keys)
        totals = [totals[0] + c1, totals[1] + c2, totals[2] + e]
        print(f"{label[config]:>18s} {c1:9.1f} {c2:9.1f} {c2 / max(c1, 1e-9):6.2f} {e:10.0f} {w2:10.1f}")
    print(f"{'all configs':>18s} {totals[0]:9.1f} {totals[1]:9.1f} {totals[1] / max(totals[0], 1e-9):6.2f} "
          f"{totals[2]:10.0f}")
    span = schedule(list(extrap.values()), args.target_jobs)
    longest = max(extrap, key=extrap.get)
    print(f"estimated whole grid at N = {args.target_n} with --jobs {args.target_jobs} (a full core per worker): "
          f"{span:.0f} s = {span / 60:.1f} min wall, {totals[2]:.0f} s CPU; longest unit {label[longest[0]]} "
          f"steps={list(longest[1])}: {extrap[longest]:.0f} s")


if __name__ == "__main__":
    main()
