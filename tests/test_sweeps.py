"""A W&B sweep point runs for real in W&B's offline mode and logs the results table."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_build_args_order() -> None:
    sys.path.insert(0, str(ROOT / "sweeps"))
    from run_point import build_args, parse

    args = build_args(parse(["--config=configs/mdlm.yaml", "--data_config=configs/data/english.yaml", "--steps=64", "--seed=5", "--no_wandb"]))
    assert args[:5] == ["predict", "--config", "configs/mdlm.yaml", "--config", "configs/data/english.yaml"]
    assert args[args.index("--model.steps") + 1] == "[64]" and args[args.index("--seed_everything") + 1] == "5"
    with pytest.raises(SystemExit):
        parse(["--config=configs/mdlm.yaml", "--steps=0"])


def test_sweep_point_offline(tmp_path: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    cmd = [sys.executable, str(ROOT / "sweeps" / "run_point.py"), "--config=configs/mdlm.yaml", "--steps=4",
           "--num_sequences=8", "--seq_len=16", f"--output_root={tmp_path}"]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    run_dir = tmp_path / "mdlm-steps4-seed123"
    rows = json.loads((run_dir / "metrics.json").read_text())["rows"]
    assert [(r["sampler"], r["steps"]) for r in rows] == [("mdlm", 4)]
    tables = list(run_dir.glob("wandb/offline-run-*/files/media/table/results_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"][:3] == ["sampler", "label", "steps"] and table["data"][0][0] == "mdlm"
