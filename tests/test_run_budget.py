"""Absurd sizes are refused at wiring in one line that names the field, the estimate and the machine's memory."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from dllm_lit.cli import main
from dllm_lit.engine.budget import MAX_STEP_VALUES, check_run_fits, estimate_run, machine_memory
from dllm_lit.engine.plan import RunPlan, WorkItem
from dllm_lit.samplers import AR, MDLM

REPO = Path(__file__).resolve().parents[1]
GB = 10**9


def test_estimate_of_a_shipped_run() -> None:
    """The default run (N = 512, T = 1024, 8 step counts + the reference row, V = 27) needs a few tens of MB."""
    est = estimate_run(512, 1024, 27, 9, 128)
    assert est.samples_bytes == 2 * 9 * 512 * 1024  # uint8 samples, held twice while a commit serialises them
    assert est.work_bytes == 128 * 1024 * (24 + 4 * 27)
    assert est.bytes < 30 * 10**6 and est.seconds == pytest.approx(9 * 512 * 1024 / 2.6e6)
    assert check_run_fits(512, 1024, 27, 9, 128, memory=GB) == est
    assert machine_memory() is None or machine_memory() > GB


@pytest.mark.parametrize("sizes, field, memory", [
    ((10**9, 1024, 27, 9, 128), "data.num_sequences", "8.0 GB"),
    ((512, 10**7, 27, 9, 128), "data.seq_len", "8.0 GB"),
    ((512, 1024, 27, 900, 128), "model.steps", "500.0 MB"),
    ((512, 1024, 4096, 2, 10**6), "data.chunk_size", "8.0 GB"),
])
def test_refusal_names_the_field_the_estimate_and_the_memory(sizes, field, memory) -> None:
    with pytest.raises(ValueError) as err:
        check_run_fits(*sizes, memory=int(float(memory.split()[0]) * (GB if memory.endswith("GB") else 10**6)))
    msg = str(err.value)
    assert msg.startswith(f"{field} is too large for this machine: the run needs about ")
    assert f"this machine has {memory}" in msg and msg.endswith(f"lower {field}") and "\n" not in msg


def _cli(tmp_path: Path, *args: str) -> tuple[int, list[str], float]:
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--config", str(REPO / "configs/mdlm.yaml"), *args, "--trainer.default_root_dir",
              str(tmp_path / "run")])
    return exc.value.code, time.perf_counter() - started


@pytest.mark.parametrize("args, start", [
    (["--data.num_sequences", "1000000000"], "error: data.num_sequences is too large for this machine"),
    (["--data.seq_len", "1000000000"], "error: data.seq_len is too large for this machine"),
    (["--model.steps", "[" + ", ".join(str(i) for i in range(1, 10**6 + 1)) + "]"],
     f"error: model.steps must list at most {MAX_STEP_VALUES} step counts"),
])
def test_cli_refuses_absurd_sizes_fast(tmp_path, capsys, args, start) -> None:
    code, took = _cli(tmp_path, *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(start), err
    assert took < 5.0
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_config_file_with_a_huge_steps_list_is_refused_before_parsing(tmp_path, capsys) -> None:
    cfg = tmp_path / "big.yaml"
    cfg.write_text("model:\n  class_path: dllm_lit.samplers.MDLM\n  init_args:\n    steps: ["
                   + ", ".join(str(i) for i in range(1, 200_001)) + "]\n")
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "run")])
    assert exc.value.code == 2 and time.perf_counter() - started < 5.0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: steps in {cfg} must list at most {MAX_STEP_VALUES} step counts (each is a row of N sequences), "
        "got 200000"]


def test_sampler_refuses_a_huge_steps_grid() -> None:
    with pytest.raises(ValueError, match=f"steps must list at most {MAX_STEP_VALUES} step counts"):
        MDLM(steps=list(range(1, MAX_STEP_VALUES + 2)))


def test_work_list_is_lazy_and_equals_the_eager_list() -> None:
    plan = RunPlan.build(MDLM(steps=[4, 8]), num_sequences=10**9, seq_len=16, seed=0, chunk_size=1, reference=AR())
    started = time.perf_counter()
    work = plan.work()
    assert len(work) == 3 * 10**9 and work[-1] == WorkItem(2, 10**9 - 1, 10**9)
    plan.done = {1}
    assert len(plan.pending_work()) == 2 * 10**9 and plan.pending_work()[10**9] == WorkItem(2, 0, 1)
    assert time.perf_counter() - started < 0.5
    small = RunPlan.build(MDLM(steps=[4, 8]), num_sequences=10, seq_len=16, seed=0, chunk_size=4, reference=AR())
    small.done = {0}
    eager = [WorkItem(i, s, min(s + 4, 10)) for i in (1, 2) for s in range(0, 10, 4)]
    assert list(small.pending_work()) == eager and small.pending_work() == eager
    small.done = {0, 1, 2}
    assert small.pending_work() == [] and not small.pending_work()
