"""An orphaned DDP rank and a process group that never forms end the process with one line, within seconds."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: a "rank" that starts the watcher as the CLI does, then waits (as a rank blocked in init_process_group would)
RANK = textwrap.dedent("""
    import sys, time
    from types import SimpleNamespace
    from dllm_lit.engine.process_group import watch_peers
    trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(_start_method="popen"))
    assert watch_peers(trainer) is not None
    print("watching", flush=True)
    time.sleep(120)
""")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "DLLM_LIT_LAUNCHER_PID")}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


def test_orphaned_rank_exits_with_one_line(tmp_path) -> None:
    """A launcher starts the rank (its child) and dies; the rank notices within seconds."""
    err = tmp_path / "rank.err"
    launcher = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys
        env = dict(os.environ, LOCAL_RANK="1", DLLM_LIT_LAUNCHER_PID=str(os.getpid()))
        rank = subprocess.Popen([sys.executable, "-c", {RANK!r}], env=env, stdout=subprocess.PIPE, text=True,
                                stderr=open({str(err)!r}, "w"))
        assert rank.stdout.readline().strip() == "watching"
        print(rank.pid, flush=True)
    """)], env=_env(), stdout=subprocess.PIPE, text=True)
    rank_pid = int(launcher.stdout.readline())
    launcher.wait(timeout=60)  # the launcher has ended: the rank is an orphan now
    started = time.perf_counter()
    while time.perf_counter() - started < 30:
        try:
            os.kill(rank_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(rank_pid, signal.SIGKILL)
        pytest.fail("the orphaned rank did not exit within 30 s")
    assert time.perf_counter() - started < 10.0
    assert err.read_text().strip().splitlines() == [
        f"error: rank 0 (pid {launcher.pid}), which launched this rank, has ended; stopping local rank 1"]


def test_process_group_set_up_times_out_with_one_line() -> None:
    out = subprocess.run([sys.executable, "-c", RANK], env=_env(DLLM_LIT_DDP_SETUP_TIMEOUT="1"), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "error: the process group was not set up within 1 s (a rank did not start or join); set "
        "DLLM_LIT_DDP_SETUP_TIMEOUT to wait longer; stopping local rank 0"]


def test_bad_setup_timeout_is_refused() -> None:
    from types import SimpleNamespace

    from dllm_lit.engine import process_group

    trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(_start_method="popen"))
    os.environ["DLLM_LIT_DDP_SETUP_TIMEOUT"] = "soon"
    try:
        with pytest.raises(ValueError, match="DLLM_LIT_DDP_SETUP_TIMEOUT must be a number of seconds > 0, got 'soon'"):
            process_group.watch_peers(trainer)
    finally:
        del os.environ["DLLM_LIT_DDP_SETUP_TIMEOUT"]
    assert process_group.watch_peers(SimpleNamespace(world_size=1, strategy=None)) is None
    spawn = SimpleNamespace(world_size=2, strategy=SimpleNamespace(_start_method="spawn"))
    assert process_group.watch_peers(spawn) is None


@pytest.mark.slow
def test_killing_rank_0_of_a_cli_ddp_run_ends_rank_1(tmp_path) -> None:
    """kill -9 of rank 0 while rank 1 starts (or waits in init_process_group): rank 1 exits in < 60 s, one line."""
    err = tmp_path / "err.txt"
    rank0 = subprocess.Popen([sys.executable, "cli.py", "predict", "--config", "configs/mdlm.yaml", "--model.steps", "[4]",
                              "--data.num_sequences", "8", "--data.seq_len", "16", "--trainer.accelerator", "cpu",
                              "--trainer.devices", "2", "--trainer.strategy", "ddp",
                              "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path / "run")],
                             cwd=REPO, env=_env(DLLM_LIT_CACHE=str(tmp_path / "cache")), stdout=subprocess.DEVNULL,
                             stderr=open(err, "w"))
    children: list[int] = []
    deadline = time.perf_counter() + 240
    while not children and time.perf_counter() < deadline and rank0.poll() is None:
        time.sleep(0.2)
        path = Path(f"/proc/{rank0.pid}/task/{rank0.pid}/children")
        children = [int(p) for p in path.read_text().split()] if path.exists() else []
    assert children, "rank 0 did not launch rank 1"
    time.sleep(3)  # let rank 1 get on with its start-up
    rank0.send_signal(signal.SIGKILL)
    rank0.wait()
    killed = time.perf_counter()
    while time.perf_counter() - killed < 60 and Path(f"/proc/{children[0]}").exists():
        time.sleep(0.2)
    took = time.perf_counter() - killed
    if Path(f"/proc/{children[0]}").exists():
        os.kill(children[0], signal.SIGKILL)
    assert took < 60.0, "the orphaned rank 1 was still alive 60 s after rank 0 died"
    assert f"error: rank 0 (pid {rank0.pid}), which launched this rank, has ended; stopping local rank 1" in \
        err.read_text().splitlines()


def test_the_launcher_watch_loads_nothing_heavy() -> None:
    """cli.py starts it before the libraries load, so an orphan is noticed even while they load."""
    code = "import sys, dllm_lit.util.orphan; print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]"
