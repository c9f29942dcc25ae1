"""The commands of README "Test your own sampler code" and docs/oracle_model.md, run as written (slow)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1",
               DLLM_LIT_CACHE=os.environ.get("DLLM_LIT_CACHE", str(tmp_path / "cache")))
    return subprocess.run([sys.executable] + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_readme_conform_command(tmp_path) -> None:
    out = run(["cli.py", "conform", "--sampler", "examples/llada_conform.yaml", "--law", "llada", "--law-options",
               "{temperature: 1.0, prompt_len: 1}", "--chain", "generic", "--seq-len", "4"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("CONFORMS")


@pytest.mark.slow
@pytest.mark.parametrize("config, size", [("examples/llada_external.yaml", ["64", "256"]),
                                          ("examples/dream_external.yaml", ["64", "128"])])
def test_example_configs_run(tmp_path, config, size) -> None:
    out = run(["cli.py", "predict", "--config", config, "--data.num_sequences", size[0], "--data.seq_len", size[1],
               "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.enable_progress_bar", "false"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()


@pytest.mark.slow
def test_diffusers_script(tmp_path) -> None:
    pytest.importorskip("diffusers")
    out = run(["examples/diffusers_llada2.py"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("in the beginning|")
