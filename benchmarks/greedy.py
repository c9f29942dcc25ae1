"""Greedy parallel decoders scored exactly: which find the world's mode given a prompt, and at what cost.

Each zoo config runs at temperature 0 (its other options as shipped; one block over the generated part) on M prompts
drawn from the world (a prefix of P tokens; T tokens in all, G = T - P generated), one continuation each, on the
conditioned oracle (:mod:`dllm_lit.experiments.prompted`).  Every output is scored against the exact mode and k best given
its prompt (:mod:`dllm_lit.metrics.functional.greedy`): per-token regret with its interval over prompts (Hall's
skewness-corrected t), the fraction of outputs that are a mode, the median rank (k + 1 = beyond the k best), NFE,
and the sampler's CPU seconds (``time.process_time``, this process, one thread).

    python benchmarks/greedy.py --world chain --seq-len 32 --prefix 8 --prompts 64 --steps 24 6
    python benchmarks/greedy.py --world order2 --seq-len 32 --prefix 8 --prompts 64 --steps 24 6
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dllm_lit.experiments.prompted import draw_prompts, sample_prompted  # noqa: E402
from dllm_lit.experiments.conform import build_sampler  # noqa: E402
from dllm_lit.metrics.functional.greedy import greedy_scores  # noqa: E402
from dllm_lit.metrics.functional.conditional import per_prompt_mean  # noqa: E402
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval  # noqa: E402

#: the zoo's configs with a temperature (run at 0), and KLASS (shipped at 0)
CONFIGS = ("llada", "fast_dllm", "fast_dllm_factor", "dream_maskgit_plus", "dream_topk_margin", "dream_entropy",
           "klass", "maskgit", "pc_sampler", "eb_sampler", "dus", "wino", "slowfast", "llada21", "p2")
#: configs whose step count only keys the randomness (adaptive): run once, at steps = G
ADAPTIVE = ("fast_dllm", "fast_dllm_factor", "eb_sampler", "wino", "slowfast")


def world_of(name: str):
    from dllm_lit.sources import EnglishChars, KthOrderChars

    return EnglishChars().build() if name == "chain" else KthOrderChars(order=2).build()


def greedy_block(name: str, G: int) -> dict:
    """The config's model block at temperature 0, one block over the G generated positions."""
    block = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["model"]
    args = dict(block.get("init_args") or {})
    if "temperature" in args:
        args["temperature"] = 0.0
    if "block_length" in args:
        args["block_length"] = G
    return {"class_path": block["class_path"], "init_args": args}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", choices=("chain", "order2"), default="chain")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--steps", type=int, nargs="+", default=None, help="default: G and G / 4")
    ap.add_argument("--rank-limit", type=int, default=20)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    torch.set_num_threads(1)
    world = world_of(ns.world)
    T, P, M = ns.seq_len, ns.prefix, ns.prompts
    G = T - P
    steps_grid = ns.steps or [G, max(1, G // 4)]
    canvases = draw_prompts(world, M, T, ns.seed, prefix=P)
    t0 = time.process_time()
    ref = sample_prompted(None, world, canvases, 1, None, ns.seed)
    searches: dict = {}
    greedy_scores(world, ref.samples, canvases[ref.prompt], ns.rank_limit, searches)
    mode_cpu = time.process_time() - t0
    print(f"world {ns.world}, V = {world.vocab_size}, T = {T}, prefix {P} (G = {G}), {M} prompts, seed {ns.seed}; "
          f"exact modes and {ns.rank_limit}-best lists of the {M} prompts (and the exact samples' scores): "
          f"{mode_cpu:.1f} CPU s")
    print("| config | steps | NFE | regret per token [95% CI] | = mode | median rank | CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows = [("exact samples (AR, temperature 1)", None, ref)]
    for name in ns.configs:
        block = greedy_block(name, G)
        for steps in ([G] if name in ADAPTIVE else steps_grid):
            sampler = build_sampler(yaml.safe_dump({"class_path": block["class_path"],
                                                    "init_args": {**block["init_args"], "steps": steps}}))
            sampler.connect(world)
            t0 = time.process_time()
            run = sample_prompted(sampler, world, canvases, 1, steps, ns.seed)
            cpu = time.process_time() - t0
            rows.append((name, steps, run, cpu))
    for row in rows:
        name, steps, run = row[:3]
        cpu = row[3] if len(row) > 3 else float("nan")
        s = greedy_scores(world, run.samples, canvases[run.prompt], ns.rank_limit, searches)
        per = per_prompt_mean(s.regret, run.prompt, M)
        lo, hi = skew_corrected_t_interval(per, 0.95)
        rank = s.rank.sort().values[(s.rank.numel() - 1) // 2]
        rank_s = f"> {ns.rank_limit}" if int(rank) > ns.rank_limit else str(int(rank))
        nfe = run.stats["nfe"]
        nfe_s = "-" if bool(nfe.isnan().all()) else f"{float(nfe.mean()):.1f}"
        print(f"| {name} | {steps if steps is not None else '-'} | {nfe_s} | {float(per.mean()):.4f} "
              f"[{lo:.4f}, {hi:.4f}] | {float(s.is_mode.double().mean()):.2f} | {rank_s} | "
              f"{'-' if cpu != cpu else f'{cpu:.1f}'} |")


if __name__ == "__main__":
    main()
