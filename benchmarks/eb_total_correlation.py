"""How loose is the EB-sampler's entropy bound?  Exact per-step total correlation under the oracle.

    PYTHONPATH=. python benchmarks/eb_total_correlation.py [--num-sequences 32] [--seq-len 128] [--gammas ...]

Runs the EB-sampler's rule on the bundled English chain in float64 with exact posteriors: at each step the
masked positions are sorted by the entropy of their posterior (ascending, lower position first on ties) and
the first k commit, k the largest with sum H - max H <= gamma (at least one; ``entropy_bound_count``, the
sampler's own function); their tokens are drawn from their exact marginals (temperature 1, as
``configs/eb_sampler.yaml``).  For every step it records the bound sum H - max H and the exact total
correlation of the committed set given the revealed tokens (``dllm_lit.theory.step_correlation``), the
error of drawing them independently.  Prints per gamma: steps per sequence, the mean per-step bound and
TC, their ratio over all steps, the largest step TC, the mean TC relative to gamma, the TC summed per token,
and the CPU time.  The draws are this script's own
(numpy, seeded), not the sampler's.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dllm_lit.samplers.eb_sampler import entropy_bound_count
from dllm_lit.sources import english_char_chain
from dllm_lit.theory.step_correlation import _entropy_rows, chain_powers, marginals, step_total_correlation


def run_sequence(powers, pi, T: int, gamma: float, rng: np.random.Generator) -> list[tuple[float, float, int]]:
    """[(bound, tc, k)] per step of one sequence."""
    z = np.full(T, -1)
    out = []
    while (z < 0).any():
        pos = np.flatnonzero(z < 0)
        mu = marginals(powers, pi, z, pos)
        H = _entropy_rows(mu)
        order = np.argsort(H, kind="stable")
        k = int(entropy_bound_count(torch.from_numpy(-H[order])[None, :], gamma)[0])
        chosen = pos[order[:k]]
        tc, sh, mh = step_total_correlation(powers, pi, z, chosen)
        out.append((sh - mh, tc, k))
        cdf = mu[order[:k]].cumsum(1)
        u = rng.random(k)[:, None] * cdf[:, -1:]
        z[chosen] = np.minimum((cdf <= u).sum(1), cdf.shape[1] - 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-sequences", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--gammas", nargs="*", type=float, default=[0.01, 0.1, 1.0, 3.0, 10.0, 30.0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    chain = english_char_chain()
    P, pi = chain.kernel.numpy().astype(np.float64), chain.stationary.numpy().astype(np.float64)
    T = args.seq_len
    powers = chain_powers(P, T)
    print("| gamma | steps / sequence | tokens / step | mean bound / step | mean TC / step | TC / bound | "
          "max TC / step | mean TC / gamma | TC per token |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for gamma in args.gammas:
        c0 = time.process_time()
        rng = np.random.default_rng(args.seed)
        steps = [s for _ in range(args.num_sequences) for s in run_sequence(powers, pi, T, gamma, rng)]
        b = np.array([s[0] for s in steps])
        tc = np.array([s[1] for s in steps])
        k = np.array([s[2] for s in steps])
        n = args.num_sequences
        print(f"| {gamma:g} | {len(steps) / n:.1f} | {k.mean():.2f} | {b.mean():.3g} | {tc.mean():.3g} | "
              f"{tc.sum() / b.sum() if b.sum() > 0 else float('nan'):.3f} | {tc.max():.3g} | {tc.mean() / gamma:.3g} | "
              f"{tc.sum() / n / T:.3g} | ({time.process_time() - c0:.0f} s CPU)")
    print(f"\nEnglish chain, N = {args.num_sequences}, T = {T}, seed {args.seed}")


if __name__ == "__main__":
    main()
