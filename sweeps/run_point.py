"""One point of a W&B sweep: run ``cli.py predict`` for one (sampler config, steps, seed).

W&B agents call this script with ``--key=value`` arguments (see ``sweeps/paper_grid.yaml``); it
builds the LightningCLI argument list in a fixed order (config first, overrides after), logs to
W&B through Lightning's WandbLogger and writes results under ``outputs/sweeps/<run name>``.

    wandb sweep sweeps/paper_grid.yaml          # prints a sweep id
    wandb agent <entity>/<project>/<sweep id>   # on each machine / GPU; any number of agents

Offline (no W&B account): ``WANDB_MODE=offline python sweeps/run_point.py --config configs/mdlm.yaml --steps 64``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dllm_lit.cli import main as cli_main


def build_args(ns: argparse.Namespace) -> list[str]:
    name = f"{Path(ns.config).stem}" + (f"-steps{ns.steps}" if ns.steps is not None else "") + f"-seed{ns.seed}"
    args = ["predict", "--config", ns.config]
    if ns.steps is not None:
        args += ["--model.steps", f"[{ns.steps}]"]
    args += ["--plan.reference", str(ns.reference).lower(), "--seed_everything", str(ns.seed),
             "--trainer.default_root_dir", str(Path(ns.output_root) / name)]
    if ns.data_config:
        args[3:3] = ["--config", ns.data_config]
    for key in ("num_sequences", "seq_len", "chunk_size"):
        if getattr(ns, key) is not None:
            args += [f"--data.{key}", str(getattr(ns, key))]
    if ns.devices:
        args += ["--trainer.devices", ns.devices]
        if ns.devices not in ("1", "cpu"):
            args += ["--trainer.strategy", "ddp"]
    if not ns.no_wandb:
        logger = {"class_path": "lightning.pytorch.loggers.WandbLogger",
                  "init_args": {"project": ns.project, "name": name, "save_dir": str(Path(ns.output_root) / name)}}
        args += ["--trainer.logger", json.dumps(logger)]
    return args


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="sampler config, e.g. configs/remdm_conf.yaml")
    ap.add_argument("--data_config", default=None, help="optional data config, e.g. configs/data/text8.yaml")
    ap.add_argument("--steps", type=int, default=None, help="one step count (samplers without steps, e.g. AR: omit)")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--reference", type=lambda s: s.lower() in ("1", "true", "yes"), default=False,
                    help="also write the reference row of exact chain samples (the AR baseline)")
    ap.add_argument("--num_sequences", type=int, default=None)
    ap.add_argument("--seq_len", type=int, default=None)
    ap.add_argument("--chunk_size", type=int, default=None)
    ap.add_argument("--devices", default=None, help="Lightning devices, e.g. 'auto' or '4' (DDP when > 1)")
    ap.add_argument("--project", default="dllm_lit")
    ap.add_argument("--output_root", default="outputs/sweeps")
    ap.add_argument("--no_wandb", action="store_true", help="run without the W&B logger")
    ns = ap.parse_args(argv)
    if ns.steps is not None and ns.steps < 1:
        ap.error(f"--steps must be >= 1, got {ns.steps}")
    return ns


if __name__ == "__main__":
    cli_main(build_args(parse()))
