"""The world-sweep report reads runs of several worlds (rho) and writes its figures and table."""
from __future__ import annotations

import json

import torch

from dllm_lit.experiments import world_sweep
from dllm_lit.sources import SwitchingChains


def _run(path, rho: float) -> None:
    path.mkdir(parents=True)
    src = SwitchingChains(num_chains=2, rho=rho)
    x = src.build().sample(32, 70, seed=1)
    meta = {"chain": {"fingerprint": str(rho), "vocab_size": 27, "source": src.describe()},
            "num_sequences": 32, "seq_len": 70, "seed": 1}
    rows = [{"sampler": "ar", "label": "ar", "steps": None, "seed": 1},
            {"sampler": "mdlm", "label": "mdlm", "steps": 8, "seed": 1, "kl_excess": 0.1 * rho,
             "kl_excess_ci": [0.0, 0.2], "ngram_kl2_excess": 0.05, "ngram_kl3_excess": None, "dep_excess": -0.01}]
    (path / "metrics.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    torch.save({"format": "dllm_lit.samples", "version": 1,
                "rows": [{"sampler": r["sampler"], "label": r["label"], "steps": r["steps"], "seed": 1, "samples": x}
                         for r in rows]}, path / "samples.pt")


def test_world_sweep_report(tmp_path) -> None:
    _run(tmp_path / "runs" / "a", 0.0)
    _run(tmp_path / "runs" / "b", 1.0)
    assert world_sweep.main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    figs = sorted(p.name for p in (tmp_path / "rep" / "figures").iterdir())
    assert figs == ["dependence_mdlm-steps8.png", "exact_dependence_vs_rho.png", "world_metrics_vs_rho.png"]
    table = (tmp_path / "rep" / "world_sweep.md").read_text()
    assert "| mdlm | 8 | 1 | 0.1000 [0.0000, 0.2000] | 0.0500 | - | -0.0100 |" in table
    assert world_sweep.main([str(tmp_path / "runs"), "--out", str(tmp_path / "r2"), "--option", "order"]) == 2
