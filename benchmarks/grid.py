"""Run the paper's full grid in one process and print wall time per sampler and the KL table.

    python benchmarks/grid.py                       # bundled English chain, N = 512, T = 1024
    python benchmarks/grid.py --synthetic           # OWT-sized synthetic chain (V = 4096, K = 206, eps = 1e-4)
    python benchmarks/grid.py --num-sequences 64 --seq-len 256 --configs configs/mdlm.yaml

Samplers are built from the project's YAML configs (``model.class_path`` / ``init_args``) with
one shared :class:`OracleDenoiser`, so the timings are of exactly what ``cli.py predict`` runs
(without the Lightning loop and the result files).  The AR row is exact chain sampling.
"""
from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

import torch
import yaml

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics import TransitionMetrics
from dllm_lit.sources import english_char_chain

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = ["mdlm", "mdlm_paper", "llada", "sedd", "remdm_conf", "remdm_loop"]
STEPS = [8, 16, 32, 64, 128, 256, 512, 1024]


def build_sampler(config: Path, denoiser: OracleDenoiser):
    cfg = yaml.safe_load(config.read_text())["model"]
    module, name = cfg["class_path"].rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    kwargs = {k: v for k, v in (cfg.get("init_args") or {}).items() if k not in ("steps", "ar_baseline", "denoiser")}
    sampler = cls(denoiser=denoiser, **kwargs)
    sampler.attach_chain(denoiser.chain)
    return sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=[str(ROOT / "configs" / f"{c}.yaml") for c in PAPER_CONFIGS])
    ap.add_argument("--steps", nargs="*", type=int, default=STEPS)
    ap.add_argument("--num-sequences", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--synthetic", action="store_true", help="OWT-sized synthetic chain instead of the English chain")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    t0 = time.perf_counter()
    chain = synthetic_chain(4096, 206, eps=1e-4, seed=0) if args.synthetic else english_char_chain()
    denoiser = OracleDenoiser(chain).to(args.device)
    print(f"chain {chain!r}; oracle {denoiser.extra_repr()}; built in {time.perf_counter() - t0:.1f} s")
    print(f"N={args.num_sequences} T={args.seq_len} steps={args.steps} device={args.device} threads={torch.get_num_threads()}")
    N, T = args.num_sequences, args.seq_len
    kl: dict[str, dict[int | None, float]] = {}
    times: dict[str, float] = {}
    grid_start = time.perf_counter()

    t0 = time.perf_counter()
    m = TransitionMetrics(chain)
    for start in range(0, N, args.chunk_size):
        n = min(args.chunk_size, N - start)
        m.update(chain.sample(n, T, seed=args.seed, start_index=start, device=args.device).cpu())
    times["ar"] = time.perf_counter() - t0
    kl["ar"] = {None: m.compute()["kl"]}
    print(f"{'ar':>12s}: {times['ar']:7.1f} s")

    for config in args.configs:
        sampler = build_sampler(Path(config), denoiser).to(args.device)
        name = sampler.name
        kl[name] = {}
        t0 = time.perf_counter()
        for steps in args.steps:
            m = TransitionMetrics(chain)
            for start in range(0, N, args.chunk_size):
                n = min(args.chunk_size, N - start)
                m.update(sampler.sample(n, T, steps, seed=args.seed, start_index=start).cpu())
            kl[name][steps] = m.compute()["kl"]
        times[name] = time.perf_counter() - t0
        print(f"{name:>12s}: {times[name]:7.1f} s")
    total = time.perf_counter() - grid_start
    print(f"{'whole grid':>12s}: {total:7.1f} s")
    print()
    print("transition KL (nats) by sampler and steps; AR = exact chain samples")
    header = f"{'sampler':>12s} " + " ".join(f"{s:>8d}" for s in args.steps)
    print(header)
    print(f"{'ar':>12s} " + " ".join(f"{kl['ar'][None]:8.4f}" for _ in args.steps))
    for name, row in kl.items():
        if name != "ar":
            print(f"{name:>12s} " + " ".join(f"{row[s]:8.4f}" for s in args.steps))


if __name__ == "__main__":
    main()
