"""The random-order theory in an HMM world, by exact-sample Monte Carlo (estimated, with errors; docs/theory.md).

    python benchmarks/theory_hmm.py [--seq-len 64 128] [--num-sequences 4096 2048] [--steps 4 8 16 32]

For the default synthetic HMM world (16 hidden states, V = 27, stay 0.9): the information curve Z and the paper
MDLM's expected KL(world || sampler | order) per token for uniform rounds, estimated from exact samples along
random orders (``dllm_lit.theory.monte_carlo``, seed 3, 95% Student t interval), against the forward KL measured
on independent exact samples (``seq_kl_fwd``, N = 2048, seed 5, 95% skew-corrected t interval), with the z-score
of their difference; beside it the Rao-Blackwellised estimate from the same samples and orders
(``dllm_lit.theory.hmm_information.rao_blackwell_conditionals``: the entropy of the oracle's row at every masked
position instead of one drawn token) and its interval width over the measurement's.  Prints a Markdown table
and the CPU and wall time.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from dllm_lit.metrics.bootstrap import metric_interval
from dllm_lit.metrics.forward_kl import ForwardSequenceKL
from dllm_lit.denoisers import HMMOracleDenoiser
from dllm_lit.samplers import MDLMPaper
from dllm_lit.samplers.reference_scoring import order_log_conditionals
from dllm_lit.sources.hmm_synthetic import HMMSynthetic
from dllm_lit.theory import uniform_rounds
from dllm_lit.theory.hmm_information import rao_blackwell_conditionals
from dllm_lit.theory.monte_carlo import information_curve_estimate, schedule_kl_estimate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", nargs="*", type=int, default=[64, 128])
    ap.add_argument("--num-sequences", nargs="*", type=int, default=[4096, 2048])
    ap.add_argument("--steps", nargs="*", type=int, default=[4, 8, 16, 32])
    ap.add_argument("--measured", type=int, default=2048)
    args = ap.parse_args()
    torch.set_num_threads(1)
    world = HMMSynthetic().build()
    sampler = MDLMPaper().connect(world)
    sampler.score_reference = True
    t0, c0 = time.perf_counter(), time.process_time()
    oracle64 = HMMOracleDenoiser(world, dtype=torch.float64)
    print("| T | steps | Monte Carlo prediction [95%] | Rao-Blackwellised prediction [95%] | measured seq_kl_fwd [95%] "
          "| z (MC) | z (RB) | width RB / measured |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for T, n in zip(args.seq_len, args.num_sequences):
        c = torch.cat([order_log_conditionals(world, sampler.denoiser, torch.arange(a, min(n, a + 512)), T, 3)
                       for a in range(0, n, 512)]).numpy()
        Z, se = information_curve_estimate(c)
        rb = torch.cat([rao_blackwell_conditionals(world, oracle64, torch.arange(a, min(n, a + 512)), T, 3)
                        for a in range(0, n, 512)]).numpy()
        Zr, ser = information_curve_estimate(rb)
        for steps in args.steps:
            est, lo, hi = (v / T for v in schedule_kl_estimate(c, uniform_rounds(T, steps)))
            rest, rlo, rhi = (v / T for v in schedule_kl_estimate(rb, uniform_rounds(T, steps)))
            u = torch.cat([sampler.generate_with_stats(torch.arange(a, min(args.measured, a + 512)), T, steps, 5)[1]
                           ["ref_log_ratio"] for a in range(0, args.measured, 512)])
            m = ForwardSequenceKL()
            m.update(torch.zeros(u.numel(), T, dtype=torch.long), {"index": torch.arange(u.numel()), "ref_log_ratio": u})
            mlo, mhi = metric_interval(m, 200, 0.95, 5)["seq_kl_fwd"]
            mean = float(u.mean()) / T
            z = (est - mean) / math.hypot((hi - lo) / 3.92, (mhi - mlo) / 3.92)
            zr = (rest - mean) / math.hypot((rhi - rlo) / 3.92, (mhi - mlo) / 3.92)
            print(f"| {T} | {steps} | {est:.4f} [{lo:.4f}, {hi:.4f}] | {rest:.4f} [{rlo:.4f}, {rhi:.4f}] | "
                  f"{mean:.4f} [{mlo:.4f}, {mhi:.4f}] | {z:+.2f} | {zr:+.2f} | {(rhi - rlo) / (mhi - mlo):.2f} |", flush=True)
        print(f"\n(T = {T}, N = {n}, Monte Carlo: Z_2 = {Z[2]:.3f} +- {se[2]:.3f}, Z_8 = {Z[8]:.3f} +- {se[8]:.3f}, "
              f"Z_T = {Z[T]:.3f} +- {se[T]:.3f} nats; Rao-Blackwellised: Z_2 = {Zr[2]:.4f} +- {ser[2]:.4f}, "
              f"Z_8 = {Zr[8]:.4f} +- {ser[8]:.4f}, Z_T = {Zr[T]:.4f} +- {ser[T]:.4f} nats)\n")
    print(f"{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU (one thread)")


if __name__ == "__main__":
    main()
