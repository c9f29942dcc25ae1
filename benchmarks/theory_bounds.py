"""Schedules and bounds of the random-order theory on the bundled English chain (exact; docs/theory.md).

    python benchmarks/theory_bounds.py [--seq-len 256 1024] [--steps 8 16 32 64 128 256] [--measure 256]

1. For every T and step budget: the exact expected KL(chain || sampler | order) per token of the uniform, the
   DP-optimal and the ``tc`` / ``dtc`` template schedules (``dllm_lit.theory``), and for each schedule the three
   bounds (TC, DTC, full-conditional) with the tightest bound's ratio to the exact value (its slack).
2. With ``--measure T``: the paper's MDLM run with the ``tc`` and ``dtc`` schedules at that T (N = 1024, seed 123),
   the measured forward KL ``seq_kl_fwd`` with its 95% interval (skew-corrected t, as in a run) against the exact
   prediction.

Prints Markdown tables and the CPU and wall time.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.metrics.bootstrap import metric_interval
from dllm_lit.metrics.forward_kl import ForwardSequenceKL
from dllm_lit.samplers import MDLMPaper
from dllm_lit.sources import english_char_chain
from dllm_lit.theory import (ChainInformation, curve_totals, optimal_schedule, round_sizes_kl, schedule_bounds,
                             template_schedule, uniform_rounds)


def schedules(Z, T: int, steps: int) -> dict[str, list[int]]:
    return {"uniform": uniform_rounds(T, steps), "optimal": optimal_schedule(Z, steps)[0],
            "tc": template_schedule("tc", T, steps), "dtc": template_schedule("dtc", T, steps)}


def measure(chain, T: int, steps: int, schedule: str, n: int, seed: int) -> tuple[float, float, float, float]:
    s = MDLMPaper(schedule=schedule).connect(chain)
    s.score_reference = True
    u, theory = [], None
    for start in range(0, n, 256):
        _, st = s.generate_with_stats(torch.arange(start, min(n, start + 256)), T, steps, seed)
        u.append(st["ref_log_ratio"])
        theory = float(st["fwd_theory"][0])
    u = torch.cat(u)
    m = ForwardSequenceKL()
    m.update(torch.zeros(u.numel(), T, dtype=torch.long), {"index": torch.arange(u.numel()), "ref_log_ratio": u})
    lo, hi = metric_interval(m, 200, 0.95, seed)["seq_kl_fwd"]
    return theory, float(u.mean()) / T, lo, hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", nargs="*", type=int, default=[256, 1024])
    ap.add_argument("--steps", nargs="*", type=int, default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--measure", nargs="*", type=int, default=[])
    ap.add_argument("--num-sequences", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=123)
    args = ap.parse_args()
    torch.set_num_threads(1)
    chain = english_char_chain()
    info = ChainInformation(chain)
    t0, c0 = time.perf_counter(), time.process_time()
    print("## Exact expected KL per token of four schedules, and the bounds on each\n")
    print("| T | steps | schedule | exact KL | TC bound | DTC bound | MI bound | tightest / exact |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for T in args.seq_len:
        Z = info.curve(T)
        for steps in args.steps:
            for name, sizes in schedules(Z, T, steps).items():
                kl, b = round_sizes_kl(Z, sizes), schedule_bounds(Z, sizes)
                ratio = f"{min(b.values()) / kl:.2f}" if kl > 0 else "-"
                print(f"| {T} | {steps} | {name} | {kl / T:.6f} | {b['tc'] / T:.4g} | {b['dtc'] / T:.4g} | "
                      f"{b['mi'] / T:.4g} | {ratio} |")
        tot = curve_totals(Z)
        print(f"\n(T = {T}: TC = {tot['tc']:.1f}, DTC = {tot['dtc']:.1f}, I(X_i; X_-i) mean = {tot['mi']:.4f} nats)\n")
    if args.measure:
        print("## Measured forward KL of the template schedules (paper MDLM)\n")
        print("| T | steps | schedule | predicted | measured seq_kl_fwd | 95% interval | inside |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for T in args.measure:
            for steps in [s for s in args.steps if s < T]:
                for schedule in ("tc", "dtc"):
                    th, mean, lo, hi = measure(chain, T, steps, schedule, args.num_sequences, args.seed)
                    print(f"| {T} | {steps} | {schedule} | {th:.6f} | {mean:.6f} | [{lo:.6f}, {hi:.6f}] | "
                          f"{'yes' if lo <= th <= hi else 'no'} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU (one thread)")


if __name__ == "__main__":
    main()
