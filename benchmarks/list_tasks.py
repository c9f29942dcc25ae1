"""Every sampler config on the ParallelBench-style task worlds: exact task accuracy against NFE, in one process.

    PYTHONPATH=. python benchmarks/list_tasks.py                          # every config, four tasks
    PYTHONPATH=. python benchmarks/list_tasks.py --tasks shuffle --configs configs/mdlm_paper.yaml

Each config goes through the CLI's parser (``DllmCLI(run=False)``) with ``configs/data/list_task.yaml`` and the
engine's ``predict``, as ``sweeps/list_tasks.yaml`` runs it point by point; the accuracy's interval is the
Clopper-Pearson 95% interval the results table reports.  Paper MDLM rows also print the closed form
(``dllm_lit.sources.list_tasks.parallel_accuracy``).  Prints one Markdown table per task, then one summary table
(a row per sampler, ``accuracy/NFE`` at each step count per task).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: configs that are not sampler rows of a predict run
SKIP = {"decompose.yaml", "train_denoiser.yaml"}


def run_config(config: Path, task: str, args: argparse.Namespace) -> list[dict]:
    import yaml

    from dllm_lit.util import console
    from dllm_lit.cli import DllmCLI
    from dllm_lit.engine import predict

    with tempfile.TemporaryDirectory() as out:
        argv = ["--config", str(config), "--config", str(ROOT / "configs" / "data" / "list_task.yaml"),
                "--data.source.init_args.task", task, "--data.source.init_args.items", str(args.items),
                "--data.source.init_args.length", str(args.length), "--data.seq_len", str(args.length),
                "--data.num_sequences", str(args.num_sequences), "--seed_everything", str(args.seed),
                "--trainer.default_root_dir", out, "--trainer.enable_progress_bar", "false",
                "--results.bootstrap_resamples", "0", "--results.save_samples", "false", "--results.figures", "false",
                "--results.num_text_examples", "0", "--results.output_dir", out]
        if config.name != "ar.yaml":
            argv += ["--model.steps", str(args.steps)]
        init = yaml.safe_load(config.read_text())["model"].get("init_args") or {}
        for key in ("block_size", "block_length"):  # one block: the shipped sizes (16 .. 128) do not divide T
            if init.get(key) is not None:
                argv += [f"--model.{key}", str(args.length)]
        console.configure()
        argv0, sys.argv = sys.argv, sys.argv[:1]
        try:
            cli = DllmCLI(args=argv, run=False)
        finally:
            sys.argv = argv0
        writer = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "ResultsWriter")
        predict(cli.model, cli.datamodule, writer, trainer=cli.trainer, reference=False)
        return [dict(r) for r in writer.rows]


def main() -> None:
    from dllm_lit.metrics.task_accuracy import clopper_pearson
    from dllm_lit.samplers.selection import transfer_schedule
    from dllm_lit.sources.list_tasks import TASKS, parallel_accuracy

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--configs", nargs="+", default=None)
    ap.add_argument("--items", type=int, default=6)
    ap.add_argument("--length", type=int, default=5)
    ap.add_argument("--steps", default="[1, 2, 3, 5]")
    ap.add_argument("--num-sequences", type=int, default=256)
    ap.add_argument("--seed", type=int, default=123)
    args = ap.parse_args()
    configs = [Path(c) for c in args.configs] if args.configs else sorted(
        p for p in (ROOT / "configs").glob("*.yaml") if p.name not in SKIP)
    N = args.num_sequences
    summary: dict[str, dict[str, list[str]]] = {}
    for task in args.tasks:
        print(f"\n### {task} (items {args.items}, answer length {args.length}, N = {N}, seed {args.seed})\n")
        print("| sampler | steps | NFE | task accuracy [95%] | closed form |")
        print("| --- | --- | --- | --- | --- |")
        t0, c0 = time.perf_counter(), time.process_time()
        for config in configs:
            try:
                rows = run_config(config, task, args)
            except Exception as err:  # a sampler that refuses the world: its one line, in the table
                print(f"| {config.stem} | - | - | refused: {str(err).splitlines()[0][:120]} | |")
                continue
            for r in rows:
                acc = r["task_accuracy"]
                low, high = clopper_pearson(round(acc * N), N, 0.95)
                closed = ""
                if r["sampler"] == "mdlm_paper" and r["steps"] is not None:
                    closed = f"{float(parallel_accuracy(task, transfer_schedule(args.length, r['steps']), args.items)):.4f}"
                nfe = "-" if r.get("nfe") is None else f"{r['nfe']:.2f}"
                cell = f"{acc:.2f}" + ("" if r.get("nfe") is None else f"/{r['nfe']:.3g}")
                summary.setdefault(r["label"].split("[")[0], {}).setdefault(task, []).append(cell)
                print(f"| {r['label']} | {r['steps'] if r['steps'] is not None else '-'} | {nfe} | "
                      f"{acc:.4f} [{low:.3f}, {high:.3f}] | {closed} |", flush=True)
        print(f"\n({task}: {time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU)")
    print(f"\n### Summary: task accuracy / NFE at steps {args.steps}\n")
    print("| sampler | " + " | ".join(args.tasks) + " |")
    print("| --- |" + " --- |" * len(args.tasks))
    for label, cells in summary.items():
        print(f"| {label} | " + " | ".join(" ".join(cells.get(t, ["refused"])) for t in args.tasks) + " |")


if __name__ == "__main__":
    main()
