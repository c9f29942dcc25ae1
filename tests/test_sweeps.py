"""Sweep files and points: every sweep file expands to valid points, and a point runs for real in W&B's
offline mode (no account), logging its config, every row, the table, the figures and the result files."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dllm_lit.experiments.point import build_args, parse, point_name, point_params
from dllm_lit.experiments.sweep import grid_points, load_sweep, point_argv
from dllm_lit.results import registry

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))


def test_build_args_order() -> None:
    args = build_args(parse(["--config=configs/mdlm.yaml", "--data_config=configs/data/english.yaml", "--steps=64",
                             "--seed=5", "--no_wandb"]))
    assert args[:5] == ["predict", "--config", "configs/mdlm.yaml", "--config", "configs/data/english.yaml"]
    assert args[args.index("--model.steps") + 1] == "[64]" and args[args.index("--seed_everything") + 1] == "5"
    with pytest.raises(SystemExit):
        parse(["--config=configs/mdlm.yaml", "--steps=0"])
    with pytest.raises(SystemExit):
        parse(["--config=configs/mdlm.yaml", "--bogus=1"])


def test_point_names_carry_the_options() -> None:
    a = parse(["--config=configs/remdm_conf.yaml", "--model.top_p=1.0", "--steps=64", "--no_wandb"])
    b = parse(["--config=configs/remdm_conf.yaml", "--model.top_p=0.9", "--steps=64", "--no_wandb"])
    assert point_name(a) == "remdm_conf-top_p1-steps64-seed123" and point_name(b) == "remdm_conf-top_p0.9-steps64-seed123"
    args = build_args(a)
    assert args[args.index("--model.top_p") + 1] == "1.0"
    logger = json.loads(build_args(parse(["--config=configs/sedd.yaml", "--model.beta=10", "--steps=8"]))[-1])
    assert logger["init_args"]["name"] == "sedd-beta10-steps8-seed123"
    assert logger["init_args"]["config"]["point"]["model.beta"] == 10  # hyperparameters reach the W&B run config, as numbers


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_sweep_file_expands_to_valid_points(path: Path) -> None:
    spec = load_sweep(path)
    assert spec["program"] == "sweeps/run_point.py"
    points = grid_points(spec)
    names = set()
    for p in points:
        ns = parse(point_argv(p))
        assert (ROOT / ns.config).exists() and (ns.data_config is None or (ROOT / ns.data_config).exists())
        names.add(point_name(ns))
    assert len(names) == len(points)  # every point has its own folder
    metric = spec.get("metric", {}).get("name")
    keys = {k for s in registry.METRICS for k in s.keys}
    assert metric is None or metric in keys  # the sweep metric is an unprefixed key the writer logs


def test_sweep_point_offline(tmp_path: Path, monkeypatch) -> None:
    """A W&B agent's point (what sweeps/run_point.py runs), offline, in this process (a fresh one re-imports torch,
    lightning and wandb: 6 of its 9 CPU s)."""
    from dllm_lit.experiments.point import main as run_point
    from wandb_records import summary

    for key, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", ["run_point.py"])
    run_point(["--config=configs/remdm_conf.yaml", "--model.top_p=1.0", "--steps=4", "--num_sequences=8",
               "--seq_len=16", "--reference=true", f"--output_root={tmp_path}", "--trainer.enable_progress_bar=false"])
    import wandb

    wandb.finish()  # what the agent's process exit does: the run's records are complete on disk
    run_dir = tmp_path / "remdm_conf-top_p1-steps4-seed123"
    data = json.loads((run_dir / "metrics.json").read_text())
    assert [(r["label"], r["steps"]) for r in data["rows"]] == [("ar", None), ("remdm_conf[top_p=1]", 4)]
    assert json.loads((run_dir / "point.json").read_text())["model.top_p"] == 1.0
    tables = list(run_dir.glob("wandb/offline-run-*/files/media/table/results_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"][:3] == ["sampler", "label", "steps"] and table["data"][1][1] == "remdm_conf[top_p=1]"
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    run = summary(run_file)
    for _ in range(100):  # W&B's service may still be writing the run's last records (seen under load): wait <= 10 s
        if run.get("name") is not None and "kl" in run.get("history", {}):
            break
        time.sleep(0.1)
        run = summary(run_file)
    assert run["name"] == "remdm_conf-top_p1-steps4-seed123"
    assert run["config"]["point"]["model.top_p"] == 1.0 and run["config"]["run"]["num_sequences"] == 8
    assert run["config"]["rows"]["remdm_conf[top_p=1]@4"]["top_p"] == 1.0
    hist = run["history"]
    assert hist["kl"] == data["rows"][1]["kl"]  # the sweep metric: the point's sampler row
    assert hist["remdm_conf[top_p=1]/kl"] == data["rows"][1]["kl"] and hist["ar/kl"] == data["rows"][0]["kl"]
    assert "figures/kl_vs_steps.filenames" in hist
    assert {"metrics.json", "samples.pt", "samples.txt", "figures/kl_vs_steps.png"} <= set(run["files"])


def test_point_options_reach_wandb_as_data() -> None:
    """Passed-on options are typed (issue 19: W&B stored model.temperature as the string "1.0"); the folder name
    keeps the text."""
    from dllm_lit.experiments.point import option_value

    ns = parse(["--config=configs/llada.yaml", "--model.temperature=1.0", "--model.remasking=random",
                "--model.block_length=null", "--data.source.init_args.eps=1e-4", "--steps=8", "--no_wandb"])
    params = point_params(ns)
    assert params["model.temperature"] == 1.0 and isinstance(params["model.temperature"], float)
    assert params["model.remasking"] == "random" and params["model.block_length"] is None
    assert params["data.source.init_args.eps"] == 1e-4
    assert point_name(ns) == "llada-temperature1-remaskingrandom-block_lengthnull-eps0.0001-steps8-seed123"
    assert [option_value(t) for t in ("10", ".5", "true", "[8, 16]", "NaN", "inf", "pi_head")] == \
        [10, 0.5, True, [8, 16], "NaN", "inf", "pi_head"]
