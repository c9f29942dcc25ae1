"""One run over two nodes on Lightning's own launcher equals one process: each "node" is a ``cli.py predict``
command with ``--trainer.num_nodes 2 --trainer.devices 2 --trainer.strategy ddp`` and the environment a cluster
gives it (MASTER_ADDR = 127.0.0.1, MASTER_PORT, NODE_RANK), which starts its second local process itself (gloo on
CPU): four processes in all.  Every metric, interval and sample equals the single-process run's.  Slow (five
Python processes load torch and Lightning)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["cli.py", "predict", "--config", "configs/mdlm.yaml", "--data.num_sequences", "24", "--data.seq_len", "32",
          "--data.chunk_size", "4", "--model.steps", "[2,8]", "--trainer.accelerator", "cpu",
          "--trainer.enable_progress_bar", "false", "--results.bootstrap_resamples", "10", "--results.figures", "false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_equal_one_process(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    one = subprocess.Popen([sys.executable, *COMMON, "--results.output_dir", str(tmp_path / "one")], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = str(free_port())
    multi = ["--trainer.devices", "2", "--trainer.num_nodes", "2", "--trainer.strategy", "ddp",
             "--results.output_dir", str(tmp_path / "multi")]
    nodes = [subprocess.Popen([sys.executable, *COMMON, *multi], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env={**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "NODE_RANK": str(rank)})
             for rank in (0, 1)]
    try:
        for proc in (one, *nodes):
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-2000:]
    finally:
        for proc in (one, *nodes):
            if proc.poll() is None:
                proc.kill()
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "multi"))
    assert a["rows"] == b["rows"] and a["meta"]["intervals"] == b["meta"]["intervals"]
    assert [r["label"] for r in a["rows"]] == ["ar", "mdlm", "mdlm"]
    sa, sb = (torch.load(tmp_path / d / "samples.pt", weights_only=True)["rows"] for d in ("one", "multi"))
    assert len(sa) == len(sb) == 3 and all(torch.equal(x["samples"], y["samples"]) for x, y in zip(sa, sb))
