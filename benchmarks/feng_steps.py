"""Token-level versus sequence-level error of parallel decoding as the length grows (Feng et al., *Theoretical
Benefit and Limitation of Diffusion Language Model*, arXiv 2502.09622: token error needs O(1) steps, sequence error
steps linear in the length), measured in the sparse first-order English chain and the order-2 English world.

    PYTHONPATH=. python benchmarks/feng_steps.py                 # both worlds; docs/figures/feng_steps.png
    PYTHONPATH=. python benchmarks/feng_steps.py --plot-only     # redraw from docs/figures/feng_steps.json

Both worlds keep the top 5 successors per context (no teleport), so a transition outside them has probability 0:
the *token error rate* (TER) is the fraction of transitions of zero probability, the *sequence error rate* (SER) the
fraction of sequences with at least one.  Paper MDLM (uniform random rounds of T / steps tokens, the exact oracle,
temperature 1) at steps 1 .. T; N sequences per point, seed 1.  Prints a Markdown table of the steps needed for
TER <= 0.02 and SER <= 0.5 at each T, and writes the figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "figures" / "feng_steps"
GRID = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
TER_GOAL, SER_GOAL = 0.02, 0.5


def worlds():
    from dllm_lit.sources import EnglishChars, KthOrderChars, SparsityOptions

    sparse = SparsityOptions(top_k=5)
    chain = EnglishChars(sparsity=sparse).build()
    order2 = KthOrderChars(order=2, sparsity=sparse).build()
    V = chain.vocab_size
    first = lambda x: chain.kernel[x[:, :-1], x[:, 1:]] == 0  # noqa: E731  (zero-probability transitions)
    second = lambda x: order2.rows[x[:, :-2] * V + x[:, 1:-1], x[:, 2:]] == 0  # noqa: E731
    return {"first-order chain": (chain, first), "order-2 world": (order2, second)}


def measure(world, invalid, lengths: list[int], num_sequences: int) -> list[dict]:
    from dllm_lit.samplers import MDLMPaper

    rows = []
    for T in lengths:
        for S in [s for s in GRID if s <= T]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # transient tokens of the top-5 chain: informational
                sampler = MDLMPaper(steps=S).connect(world)
            c0 = time.process_time()
            x = torch.cat([sampler.generate(torch.arange(a, min(num_sequences, a + 128)), T, S, seed=1)
                           for a in range(0, num_sequences, 128)])
            bad = invalid(x)
            rows.append({"T": T, "steps": S, "ter": float(bad.double().mean()), "ser": float(bad.any(1).double().mean()),
                         "cpu_s": time.process_time() - c0})
            print(f"  T = {T:4d} steps = {S:4d}: TER {rows[-1]['ter']:.4f}, SER {rows[-1]['ser']:.3f} "
                  f"({rows[-1]['cpu_s']:.1f} s CPU)", flush=True)
    return rows


def needed(rows: list[dict], T: int, key: str, goal: float) -> int | None:
    ok = [r["steps"] for r in rows if r["T"] == T and r[key] <= goal]
    return min(ok) if ok else None


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(len(results), 3, figsize=(15, 4.2 * len(results)), squeeze=False)
    for row, (name, rows) in zip(axes, results.items()):
        lengths = sorted({r["T"] for r in rows})
        cmap = plt.get_cmap("viridis")
        for k, T in enumerate(lengths):
            rs = [r for r in rows if r["T"] == T and r["steps"] < T]  # steps = T is exact: error 0
            col = cmap(k / max(len(lengths) - 1, 1))
            row[0].plot([r["steps"] for r in rs], [r["ter"] for r in rs], "o-", color=col, label=f"T = {T}")
            row[1].plot([r["steps"] / T for r in rs], [r["ser"] for r in rs], "o-", color=col, label=f"T = {T}")
        row[0].set(xscale="log", yscale="log", xlabel="steps", ylabel="token error rate",
                   title=f"{name}: token error vs steps")
        row[0].axhline(TER_GOAL, color="grey", ls=":")
        row[1].set(xscale="log", xlabel="steps / T", ylabel="sequence error rate",
                   title=f"{name}: sequence error vs steps / T")
        row[1].axhline(SER_GOAL, color="grey", ls=":")
        tok = [(T, needed(rows, T, "ter", TER_GOAL)) for T in lengths]
        seq = [(T, needed(rows, T, "ser", SER_GOAL)) for T in lengths]
        row[2].plot([t for t, s in tok if s], [s for t, s in tok if s], "o-", label=f"TER <= {TER_GOAL}")
        row[2].plot([t for t, s in seq if s], [s for t, s in seq if s], "s-", label=f"SER <= {SER_GOAL}")
        row[2].set(xscale="log", yscale="log", xlabel="T", ylabel="steps needed (smallest on the grid)",
                   title=f"{name}: steps needed vs length")
        for ax in row:
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    fig.savefig(OUT.with_suffix(".png"), dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain-lengths", nargs="*", type=int, default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--order2-lengths", nargs="*", type=int, default=[8, 16, 32, 64])
    ap.add_argument("--num-sequences", type=int, default=256)
    ap.add_argument("--order2-sequences", type=int, default=128)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.plot_only:
        results = json.loads(OUT.with_suffix(".json").read_text())
    else:
        t0, c0 = time.perf_counter(), time.process_time()
        ws = worlds()
        results = {}
        for (name, (world, invalid)), lengths, n in zip(ws.items(), (args.chain_lengths, args.order2_lengths),
                                                        (args.num_sequences, args.order2_sequences)):
            print(f"{name} (N = {n})", flush=True)
            results[name] = measure(world, invalid, lengths, n)
        OUT.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"\n{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU (one thread)")
    print(f"\n| world | T | steps for TER <= {TER_GOAL} | steps for SER <= {SER_GOAL} |")
    print("| --- | --- | --- | --- |")
    for name, rows in results.items():
        for T in sorted({r["T"] for r in rows}):
            print(f"| {name} | {T} | {needed(rows, T, 'ter', TER_GOAL)} | {needed(rows, T, 'ser', SER_GOAL)} |")
    plot(results)


if __name__ == "__main__":
    main()
