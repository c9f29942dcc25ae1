"""Run the paper's full grid in one process and print wall time per sampler and the KL table.

    python benchmarks/grid.py                       # bundled English chain, N = 512, T = 1024
    python benchmarks/grid.py --synthetic           # OWT-sized synthetic chain (V = 4096, K = 206, eps = 1e-4)
    python benchmarks/grid.py --all --jobs 2        # every shipped sampler config (configs/*.yaml with a sampler)
    python benchmarks/grid.py --num-sequences 64 --seq-len 256 --configs configs/mdlm.yaml
    python benchmarks/grid.py --synthetic --jobs 2   # configs spread over 2 processes (one core each)
    python benchmarks/grid.py --all --direct        # without the CLI's parser (a machine without jsonargparse)

Every config goes through the same parser and engine as ``cli.py predict`` (``DllmCLI`` with
``run=False``, then :func:`dllm_lit.engine.predict`), with one shared chain and oracle and the
results writer's optional work switched off (no bootstrap, no files), so a timing is what the
CLI spends sampling and computing the metrics.  The AR row (``configs/ar.yaml``) is exact chain
sampling.  The grid runs as work units: each config's large step counts (> 128) one unit each, its
small ones together (every step count's samples depend only on the seed and the step count, not on
what else runs).  With ``--jobs J`` the units run in J worker processes, largest first (each samples
with one thread, as the CLI does; the oracle's power table is memory-mapped from the disk cache, so it
is shared); the whole-grid time is then the wall time of the slowest worker.  Per config the script
prints the summed wall and CPU time of its units.  Results do not depend on ``--jobs``.

SIGINT / SIGTERM end the whole grid: the parent stops every worker (SIGTERM, then SIGKILL after
:data:`dllm_lit.util.workers.GRACE_SECONDS`) and exits with 128 + the signal number; a worker whose parent dies for
any reason (SIGKILL included) is ended by the kernel (:func:`dllm_lit.util.workers.die_with_parent`).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's dllm_lit, also when another copy is installed
if __name__ == "__mp_main__":  # a spawned pool worker: end with the parent from its first line on (not only
    from dllm_lit.util.workers import die_with_parent  # once torch has loaded, which takes seconds on a busy machine)

    die_with_parent()

import torch  # noqa: E402
#: slowest first, so that with --jobs the long ones start at once
PAPER_CONFIGS = ["llada", "remdm_loop", "remdm_conf", "sedd", "mdlm_paper", "mdlm", "ar"]


def shipped_configs() -> list[str]:
    """Every shipped sampler config (``configs/*.yaml`` whose ``model`` is a ``dllm_lit.samplers`` class): the
    paper's first, then the others by name.  ``--all`` runs these."""
    import yaml

    found = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
        if str(model.get("class_path", "")).startswith("dllm_lit.samplers."):
            found.append(path.stem)
    return [c for c in PAPER_CONFIGS if c in found] + [c for c in found if c not in PAPER_CONFIGS]
STEPS = [8, 16, 32, 64, 128, 256, 512, 1024]
#: step counts up to this share one work unit per config; larger ones get a unit each
SMALL_STEPS = 128


def has_steps(config: str) -> bool:
    """Whether a config's sampler takes step counts (every one but the exact AR baseline)."""
    return Path(config).name != "ar.yaml"


def build(config: str, args: argparse.Namespace, out: str, steps: list[int]):
    """Instantiate sampler, data module, trainer and results writer from ``config`` exactly as the CLI does
    (a ``DllmCLI``; the CLI, Lightning included, is imported here, in the workers: the parent only schedules)."""
    from dllm_lit.util import console
    from dllm_lit.cli import DllmCLI
    argv = ["--config", config]
    if args.synthetic:
        argv += ["--config", str(ROOT / "configs" / "data" / "synthetic.yaml")]
    if getattr(args, "data_config", None):
        argv += ["--config", str(args.data_config)]
    argv += ["--data.num_sequences", str(args.num_sequences), "--data.seq_len", str(args.seq_len),
             "--data.chunk_size", str(args.chunk_size), "--seed_everything", str(args.seed),
             "--trainer.default_root_dir", out, "--trainer.enable_progress_bar", "false",
             "--trainer.accelerator", args.accelerator,
             "--results.bootstrap_resamples", "0", "--results.save_samples", "false", "--results.figures", "false",
             "--results.num_text_examples", "0", "--results.output_dir", out]
    if has_steps(config):
        argv += ["--model.steps", str(steps)]
    console.configure()
    argv0, sys.argv = sys.argv, sys.argv[:1]  # the benchmark's own flags are not the CLI's
    try:
        return DllmCLI(args=argv, run=False)
    finally:
        sys.argv = argv0


class _Built:
    """What :func:`build_direct` returns: the parts of a ``DllmCLI`` that :func:`run_unit` reads."""

    def __init__(self, model, datamodule, trainer) -> None:
        self.model, self.datamodule, self.trainer = model, datamodule, trainer


def build_direct(config: str, args: argparse.Namespace, out: str, steps: list[int]) -> _Built:
    """:func:`build` without the CLI (for machines without ``jsonargparse``): the sampler from the config's model
    block, the data module with the English or the synthetic chain's source, the writer with the same switches,
    a quiet single-device Trainer.  Same settings, so the same samples and metrics."""
    import lightning as L
    import yaml

    from dllm_lit.cli.config_classes import instantiate
    from dllm_lit.data import MarkovDataModule
    from dllm_lit.results import ResultsWriter

    model = yaml.safe_load(Path(config).read_text())["model"]
    init = dict(model.get("init_args") or {})
    if has_steps(config):
        init["steps"] = steps
    sampler = instantiate({"class_path": model["class_path"], "init_args": init}, "sampler", f"{config}: model")
    source = None
    if args.synthetic:
        source = instantiate(yaml.safe_load((ROOT / "configs" / "data" / "synthetic.yaml").read_text())
                             ["data"]["init_args"]["source"], "source", "configs/data/synthetic.yaml: data.source")
    datamodule = MarkovDataModule(source=source, num_sequences=args.num_sequences, seq_len=args.seq_len,
                                  chunk_size=args.chunk_size, seed=args.seed)
    L.seed_everything(args.seed, verbose=False)
    writer = ResultsWriter(output_dir=out, bootstrap_resamples=0, save_samples=False, figures=False,
                           num_text_examples=0)
    trainer = L.Trainer(accelerator=args.accelerator, devices=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False, default_root_dir=out, callbacks=[writer])
    return _Built(sampler, datamodule, trainer)


_SHARED: dict = {}


def run_unit(config: str, steps: list[int],
             args: argparse.Namespace) -> tuple[str, float, float, dict, str | None, float]:
    """Run one config at the step counts ``steps`` (the chain and oracle are built once per process):
    (name, wall s, cpu s, kl by steps, set-up line, the process's peak resident memory so far in GB)."""
    from dllm_lit.denoisers import HMMOracleDenoiser, OracleDenoiser
    from dllm_lit.engine import predict
    from dllm_lit.markov import MarkovChain
    setup = None
    with tempfile.TemporaryDirectory() as out:
        cli = (build_direct if args.direct else build)(config, args, out, steps)
        if "chain" not in _SHARED:
            t0 = time.perf_counter()
            chain = cli.datamodule.build_chain()
            if isinstance(chain, MarkovChain):
                oracle = OracleDenoiser(chain, cache_dir=cli.datamodule.cache_dir)
                detail = f"oracle {oracle.extra_repr()}"
            else:  # an HMM world (--data-config): the exact HMM oracle
                oracle = HMMOracleDenoiser(chain)
                detail = "HMM oracle (forward-backward)"
            _SHARED.update(chain=chain, oracle=oracle)
            setup = (f"chain {chain!r}; {detail}; set up in {time.perf_counter() - t0:.1f} s "
                     f"(power table cached under {cli.datamodule.cache_dir})")
        cli.datamodule.chain = _SHARED["chain"]
        if cli.model.requires_denoiser and cli.model.denoiser is None:
            cli.model.denoiser = _SHARED["oracle"]
        writer = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "ResultsWriter")
        t0, c0 = time.perf_counter(), time.process_time()
        predict(cli.model, cli.datamodule, writer, trainer=cli.trainer, reference=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
        return cli.model.name, wall, cpu, {r["steps"]: r["kl"] for r in writer.rows}, setup, peak


def _worker_start(parent: int) -> None:
    """A pool worker's first action: end with the parent (the kernel's parent-death signal); default SIGTERM."""
    from dllm_lit.util.workers import die_with_parent

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent)


def stop_workers_on_signal() -> None:
    """SIGINT / SIGTERM in the parent: end every pool worker (SIGTERM, SIGKILL after the grace), then exit with
    128 + the signal number, without waiting for the pool's queue."""
    from dllm_lit.util.workers import end_processes

    def handler(signum, frame):
        print(f"grid: stopped by {signal.Signals(signum).name}; ending the workers", file=sys.stderr, flush=True)
        end_processes(p.pid for p in multiprocessing.active_children())
        os._exit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, handler)


def work_units(configs: list[str], steps: list[int]) -> list[tuple[str, list[int]]]:
    """(config, step counts) units, largest first: every step count above SMALL_STEPS alone, the rest of a config
    together (one unit for the AR config, which has no steps).  The grouped small step counts run first (five rows
    cost more than any single row of the same config: 3-5x a 1024-step row on the OWT-sized grid), then the single
    rows in descending step count, ties in config order; so the short units fill the workers' tails."""
    units = []
    for rank, config in enumerate(configs):
        if not has_steps(config):
            units.append((0, rank, config, []))
            continue
        small = [s for s in steps if s <= SMALL_STEPS]
        units += [(s, rank, config, [s]) for s in steps if s > SMALL_STEPS]
        if small:
            units.append((sum(small), rank, config, small))
    units.sort(key=lambda u: (len(u[3]) <= 1, -u[0], u[1]))
    return [(config, unit_steps) for _, _, config, unit_steps in units]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="*", default=None, help="config files (default: the paper's configs)")
    ap.add_argument("--all", action="store_true", help="every shipped sampler config (the paper's first)")
    ap.add_argument("--steps", nargs="*", type=int, default=STEPS)
    ap.add_argument("--num-sequences", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--synthetic", action="store_true", help="OWT-sized synthetic chain instead of the English chain")
    ap.add_argument("--data-config", default=None, help="a data fragment, e.g. configs/data/kth_order.yaml")
    ap.add_argument("--accelerator", default="gpu" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (configs run in parallel, one thread each)")
    ap.add_argument("--direct", action="store_true",
                    help="build each config without the CLI (where jsonargparse is missing, e.g. a bare GPU image)")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.configs is None:
        names = shipped_configs() if args.all else PAPER_CONFIGS
        args.configs = [str(ROOT / "configs" / f"{c}.yaml") for c in names]

    kl: dict[str, dict[int | None, float]] = {}  # by config
    spent: dict[str, list[float]] = {}  # config -> [wall, cpu] summed over its units
    names: dict[str, str] = {}
    print(f"N={args.num_sequences} T={args.seq_len} steps={args.steps} accelerator={args.accelerator} jobs={args.jobs}")
    grid_start = time.perf_counter()
    units = work_units(args.configs, args.steps)
    peak = 0.0

    def report(config: str, result) -> None:
        nonlocal peak
        name, wall, cpu, rows, setup, unit_peak = result
        if setup:
            print(setup, flush=True)
        names[config] = name
        kl.setdefault(config, {}).update(rows)
        spent.setdefault(config, [0.0, 0.0])
        spent[config][0] += wall
        spent[config][1] += cpu
        peak = max(peak, unit_peak)
        print(f"  unit {name} steps={sorted(rows, key=str)}: {wall:.1f} s wall {cpu:.1f} s cpu", flush=True)

    if args.jobs == 1:
        for config, steps in units:
            report(config, run_unit(config, steps, args))
    else:
        stop_workers_on_signal()
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_start, initargs=(os.getpid(),)) as pool:
            futures = {pool.submit(run_unit, config, steps, args): config for config, steps in units}
            for fut in as_completed(futures):  # each unit's time as soon as it is done
                report(futures[fut], fut.result())
    for config in args.configs:
        print(f"{names[config]:>18s}: {spent[config][0]:7.1f} s wall {spent[config][1]:7.1f} s cpu")
    wall_sum, cpu_sum = sum(w for w, _ in spent.values()), sum(c for _, c in spent.values())
    print(f"{'all units':>18s}: {wall_sum:7.1f} s wall {cpu_sum:7.1f} s cpu "
          f"({len(units)} units; peak resident memory of a worker {peak:.1f} GB)")
    print(f"{'whole grid':>18s}: {time.perf_counter() - grid_start:7.1f} s")
    print()
    print("transition KL (nats) by sampler and steps; ar = exact chain samples")
    print(f"{'sampler':>18s} " + " ".join(f"{s:>8d}" for s in args.steps))
    for config in args.configs:
        name, row = names[config], kl[config]
        if None in row:
            print(f"{name:>18s} " + " ".join(f"{row[None]:8.4f}" for _ in args.steps))
        else:
            print(f"{name:>18s} " + " ".join(f"{row[s]:8.4f}" for s in args.steps))


if __name__ == "__main__":
    main()
