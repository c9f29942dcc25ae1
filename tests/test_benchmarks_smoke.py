"""The benchmark scripts still run (tiny sizes); their figures are printed, not asserted."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, text=True, timeout=300)
    return out.stdout


def test_oracle_benchmark_runs() -> None:
    out = _run("benchmarks/oracle.py", "--skip-owt", "--batch", "2", "--seq-len", "64", "--repeats", "1")
    assert "speed-up" in out and "max |oracle - baseline|" in out
    diff = float(out.strip().splitlines()[-1].split(":")[-1])
    assert diff < 1e-5  # the baseline and the oracle compute the same posterior


@pytest.mark.slow  # 7 CPU s; test_oracle_benchmark_runs keeps a benchmark script in the default suite
def test_grid_benchmark_runs() -> None:
    """The grid script end to end at its smallest, one process: two configs (the six paper configs and the units in
    two workers: the slow variants below)."""
    out = _run("benchmarks/grid.py", "--num-sequences", "4", "--seq-len", "16", "--steps", "2", "130",
               "--configs", "configs/mdlm.yaml", "configs/ar.yaml")
    assert "whole grid" in out and "3 units" in out
    for name in ("mdlm", "ar"):
        assert any(line.split()[0] == name for line in out.splitlines() if line.strip()), name


@pytest.mark.slow
def test_grid_benchmark_runs_every_paper_config() -> None:
    out = _run("benchmarks/grid.py", "--num-sequences", "4", "--seq-len", "16", "--steps", "2", "4")
    assert "whole grid" in out
    for name in ("mdlm", "mdlm_paper", "llada", "sedd", "remdm_conf", "remdm_loop"):
        assert any(line.split()[0] == name for line in out.splitlines() if line.strip()), name


def _kl_table(out: str) -> list[str]:
    lines = out.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("transition KL")):]


def _grid_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import grid
    finally:
        sys.path.pop(0)
    return grid


def test_grid_work_units() -> None:
    """Large step counts run as units of their own, largest first; small ones together per config."""
    units = _grid_module().work_units(["configs/mdlm.yaml", "configs/ar.yaml", "configs/llada.yaml"], [8, 256, 1024, 16])
    assert units == [("configs/mdlm.yaml", [8, 16]), ("configs/llada.yaml", [8, 16]), ("configs/mdlm.yaml", [1024]),
                     ("configs/llada.yaml", [1024]), ("configs/mdlm.yaml", [256]), ("configs/llada.yaml", [256]),
                     ("configs/ar.yaml", [])]


@pytest.mark.slow
def test_grid_units_and_jobs_give_the_same_table() -> None:
    """The units in two parallel workers give the one-process KL table."""
    common = ["benchmarks/grid.py", "--num-sequences", "4", "--seq-len", "16", "--steps", "2", "130",
              "--configs", "configs/mdlm.yaml", "configs/llada.yaml", "configs/ar.yaml"]
    one, two = _run(*common), _run(*common, "--jobs", "2")
    assert "5 units" in one and _kl_table(one) == _kl_table(two)


@pytest.mark.slow  # a fresh interpreter running the script (6 CPU s); the metric it prints: tests/test_greedy.py
def test_greedy_benchmark_runs() -> None:
    out = _run("benchmarks/greedy.py", "--seq-len", "8", "--prefix", "4", "--prompts", "2", "--steps", "4",
               "--configs", "llada", "pc_sampler")
    rows = [line for line in out.splitlines() if line.startswith("| llada") or line.startswith("| pc_sampler")]
    assert len(rows) == 2 and "regret per token" in out
