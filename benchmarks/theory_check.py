"""The random-order theory next to measurement on the bundled English chain (exact oracle).

    python benchmarks/theory_check.py [--num-sequences 1024] [--seq-len 256 1024] [--steps 8 16 32 64 128 256]

1. Cross-validation: for the paper's MDLM (uniform round sizes), the exact prediction of
   E_order KL(chain || sampler | order) per token (``dllm_lit.theory``) against the measured forward KL
   (``seq_kl_fwd``: the reference row's exact samples scored under the sampler's per-order law) with its
   95% interval (Hall's skew-corrected t, as in a run), and whether the prediction lies inside.
2. The optimal schedule against the uniform one at the same NFE: predicted and measured forward KL, the
   paired difference (same sequences, same order keys) with its 95% normal interval, and the reverse-direction
   upper end ``seq_kl_upper`` of both.

Prints Markdown tables (the ones in docs/theory.md) and the CPU and wall time.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.metrics.bootstrap import metric_interval
from dllm_lit.metrics.forward_kl import ForwardSequenceKL
from dllm_lit.samplers import MDLMPaper
from dllm_lit.sources import english_char_chain


def run(sampler, n: int, T: int, steps: int, seed: int, chunk: int = 256):
    """(per-sequence forward log-ratio, theory per token, per-sequence log q - log p) over n sequences."""
    fwd, rev, theory = [], [], None
    for start in range(0, n, chunk):
        idx = torch.arange(start, min(n, start + chunk))
        x, st = sampler.generate_with_stats(idx, T, steps, seed)
        fwd.append(st["ref_log_ratio"])
        rev.append(st["log_q"] - sampler.chain.log_prob(x))
        theory = float(st["fwd_theory"][0])
    return torch.cat(fwd), theory, torch.cat(rev)


def interval(u: torch.Tensor, T: int, seed: int) -> tuple[float, float, float]:
    m = ForwardSequenceKL()
    m.update(torch.zeros(u.numel(), T, dtype=torch.long), {"index": torch.arange(u.numel()), "ref_log_ratio": u})
    lo, hi = metric_interval(m, 200, 0.95, seed)["seq_kl_fwd"]
    return float(u.mean()) / T, lo, hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-sequences", type=int, default=1024)
    ap.add_argument("--seq-len", nargs="*", type=int, default=[256, 1024])
    ap.add_argument("--steps", nargs="*", type=int, default=[8, 16, 32, 64, 128, 256])
    ap.add_argument("--seed", type=int, default=123)
    args = ap.parse_args()
    torch.set_num_threads(1)
    chain = english_char_chain()
    t0, c0 = time.perf_counter(), time.process_time()
    uniform, optimal = MDLMPaper().connect(chain), MDLMPaper(schedule="optimal").connect(chain)
    uniform.score_reference = optimal.score_reference = True  # the forward-KL scoring pass (results.forward_kl in a run)
    print("## Cross-validation: paper MDLM, uniform rounds\n")
    print("| T | steps | predicted | measured seq_kl_fwd | 95% interval | inside |")
    print("| --- | --- | --- | --- | --- | --- |")
    cache = {}
    for T in args.seq_len:
        for s in args.steps:
            u, th, rev = run(uniform, args.num_sequences, T, s, args.seed)
            cache[T, s] = (u, rev)
            est, lo, hi = interval(u, T, args.seed)
            print(f"| {T} | {s} | {th:.6f} | {est:.6f} | [{lo:.6f}, {hi:.6f}] | {'yes' if lo <= th <= hi else 'NO'} |")
    print("\n## Optimal against uniform round sizes (same NFE = steps)\n")
    print("| T | steps | predicted uniform | predicted optimal | gain | measured fwd uniform | measured fwd optimal "
          "| paired difference (95%) | seq_kl_upper uniform | seq_kl_upper optimal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for T in args.seq_len:
        for s in args.steps:
            u_un, rev_un = cache[T, s]
            u_op, th_op, rev_op = run(optimal, args.num_sequences, T, s, args.seed)
            th_un = run(uniform, 1, T, s, args.seed)[1]
            d = (u_op - u_un) / T
            se = float(d.std() / d.numel() ** 0.5)
            gain = (th_un - th_op) / th_un if th_un > 0 else 0.0
            print(f"| {T} | {s} | {th_un:.6f} | {th_op:.6f} | {100 * gain:.2f}% | {float(u_un.mean()) / T:.6f} | "
                  f"{float(u_op.mean()) / T:.6f} | {float(d.mean()):+.6f} ± {1.96 * se:.6f} | "
                  f"{float(rev_un.mean()) / T:.6f} | {float(rev_op.mean()) / T:.6f} |")
    print(f"\nN = {args.num_sequences}, seed {args.seed}; {time.perf_counter() - t0:.0f} s wall, "
          f"{time.process_time() - c0:.0f} s CPU")


if __name__ == "__main__":
    main()
