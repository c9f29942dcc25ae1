"""Run the paper's full grid in one process and print wall time per sampler and the KL table.

    python benchmarks/grid.py                       # bundled English chain, N = 512, T = 1024
    python benchmarks/grid.py --synthetic           # OWT-sized synthetic chain (V = 4096, K = 206, eps = 1e-4)
    python benchmarks/grid.py --all                 # plus every modern sampler (Fast-dLLM, Dream, EB, PC, FHS, ...)
    python benchmarks/grid.py --num-sequences 64 --seq-len 256 --configs configs/mdlm.yaml

Every config goes through the same parser and engine as ``cli.py predict`` (``DllmCLI`` with
``run=False``, then :func:`dllm_lit.engine.predict`), with one shared chain and oracle and the
results writer's optional work switched off (no bootstrap, no files), so a timing is what the
CLI spends sampling and computing the metrics.  The AR row (``configs/ar.yaml``) is exact chain
sampling.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from dllm_lit.cli import DllmCLI
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.engine import predict

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = ["ar", "mdlm", "mdlm_paper", "llada", "sedd", "remdm_conf", "remdm_loop"]
#: the samplers shipped beyond the paper's (``--all`` adds them)
MODERN_CONFIGS = ["fast_dllm", "fast_dllm_factor", "dream_origin", "dream_maskgit_plus", "dream_topk_margin",
                  "dream_entropy", "eb_sampler", "pc_sampler", "fhs", "maskgit", "klass", "bd3"]
STEPS = [8, 16, 32, 64, 128, 256, 512, 1024]


def build(config: str, args: argparse.Namespace, out: str) -> DllmCLI:
    """Instantiate sampler, data module, trainer and results writer from ``config`` exactly as the CLI does."""
    argv = ["--config", config]
    if args.synthetic:
        argv += ["--config", str(ROOT / "configs" / "data" / "synthetic.yaml")]
    argv += ["--data.num_sequences", str(args.num_sequences), "--data.seq_len", str(args.seq_len),
             "--data.chunk_size", str(args.chunk_size), "--seed_everything", str(args.seed),
             "--trainer.default_root_dir", out, "--trainer.enable_progress_bar", "false",
             "--trainer.accelerator", args.accelerator,
             "--results.bootstrap_resamples", "0", "--results.save_samples", "false", "--results.figures", "false",
             "--results.num_text_examples", "0", "--results.output_dir", out]
    if "ar.yaml" not in config:
        argv += ["--model.steps", str(args.steps)]
    return DllmCLI(args=argv, run=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=None, help="config files (default: the paper's configs)")
    ap.add_argument("--all", action="store_true", help="the paper's configs plus every modern sampler's")
    ap.add_argument("--steps", nargs="*", type=int, default=STEPS)
    ap.add_argument("--num-sequences", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--synthetic", action="store_true", help="OWT-sized synthetic chain instead of the English chain")
    ap.add_argument("--accelerator", default="gpu" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if args.configs is None:
        names = PAPER_CONFIGS + (MODERN_CONFIGS if args.all else [])
        args.configs = [str(ROOT / "configs" / f"{c}.yaml") for c in names]

    chain = oracle = None
    kl: dict[str, dict[int | None, float]] = {}
    times: dict[str, float] = {}
    grid_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        for config in args.configs:
            cli = build(config, args, out)
            if chain is None:
                t0 = time.perf_counter()
                chain = cli.datamodule.build_chain()
                oracle = OracleDenoiser(chain, cache_dir=cli.datamodule.cache_dir)
                print(f"chain {chain!r}; oracle {oracle.extra_repr()}; set up in {time.perf_counter() - t0:.1f} s "
                      f"(power table cached under {cli.datamodule.cache_dir})")
                print(f"N={args.num_sequences} T={args.seq_len} steps={args.steps} accelerator={args.accelerator} "
                      f"threads={torch.get_num_threads()}")
            cli.datamodule.chain = chain
            if cli.model.requires_denoiser and cli.model.denoiser is None:
                cli.model.denoiser = oracle
            writer = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "ResultsWriter")
            t0, c0 = time.perf_counter(), time.process_time()
            predict(cli.model, cli.datamodule, writer, trainer=cli.trainer, reference=False)
            name = cli.model.name
            times[name] = time.perf_counter() - t0
            kl[name] = {r["steps"]: r["kl"] for r in writer.rows}
            print(f"{name:>18s}: {times[name]:7.1f} s wall {time.process_time() - c0:7.1f} s cpu")
    print(f"{'whole grid':>18s}: {time.perf_counter() - grid_start:7.1f} s")
    print()
    print("transition KL (nats) by sampler and steps; ar = exact chain samples")
    print(f"{'sampler':>18s} " + " ".join(f"{s:>8d}" for s in args.steps))
    for name, row in kl.items():
        if None in row:
            print(f"{name:>18s} " + " ".join(f"{row[None]:8.4f}" for _ in args.steps))
        else:
            print(f"{name:>18s} " + " ".join(f"{row[s]:8.4f}" for s in args.steps))


if __name__ == "__main__":
    main()
