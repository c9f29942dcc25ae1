"""One point of a W&B sweep (``sweeps/*.yaml``): ``cli.py predict`` for one (config, options, steps, seed).

    wandb sweep sweeps/paper_grid.yaml          # prints a sweep id
    wandb agent <entity>/<project>/<sweep id>   # on each machine / GPU; any number of agents

Without a W&B server: ``python cli.py sweep sweeps/paper_grid.yaml`` runs every point locally, and
``WANDB_MODE=offline python sweeps/run_point.py --config configs/mdlm.yaml --steps 64`` one point.
The logic lives in :mod:`dllm_lit.experiments.point`.
"""
from __future__ import annotations

from dllm_lit.experiments.point import build_args, main, parse, point_name  # noqa: F401

if __name__ == "__main__":
    main()
