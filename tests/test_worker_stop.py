"""SIGINT / SIGTERM to benchmarks/grid.py (its pool) and to ``cli.py sweep`` (its point processes) end every worker
within 5 s; a parent killed outright (SIGKILL) takes its workers with it (the kernel's parent-death signal).
Real processes on long work (Duo at T = 1024, 1024 steps): slow."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_lit.util.workers import die_with_parent, end_processes

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 5.0  # seconds from the signal to the last worker's end


def descendants(pid: int) -> set[int]:
    """Live processes below ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_workers(proc: subprocess.Popen, n: int, settle: float = 3.0) -> set[int]:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        found = descendants(proc.pid)
        if len(found) >= n:
            time.sleep(settle)  # let them get to work
            return descendants(proc.pid) | found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} workers appeared")


def ended_within(pids: set[int], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def grid(tmp_path: Path) -> subprocess.Popen:
    cmd = [sys.executable, "benchmarks/grid.py", "--jobs", "2", "--num-sequences", "64", "--seq-len", "1024",
           "--steps", "512", "1024", "--configs", "configs/duo.yaml"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def sweep(tmp_path: Path) -> subprocess.Popen:
    spec = tmp_path / "stop.yaml"
    spec.write_text("program: sweeps/run_point.py\nmethod: grid\nparameters:\n"
                    "  config: {value: configs/duo.yaml}\n  steps: {values: [1024, 512]}\n"
                    "  num_sequences: {value: 64}\n  seq_len: {value: 1024}\n  reference: {value: false}\n")
    cmd = [sys.executable, "cli.py", "sweep", str(spec), "--jobs", "2", "--quiet", "--output_root", str(tmp_path)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
@pytest.mark.parametrize("start", [grid, sweep])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_workers_end_within_five_seconds(tmp_path, start, signum) -> None:
    proc = start(tmp_path)
    try:
        workers = wait_for_workers(proc, 2)
        t0 = time.monotonic()
        proc.send_signal(signum)
        assert ended_within(workers, LIMIT), f"workers alive {LIMIT} s after {signum.name}"
        proc.wait(timeout=LIMIT)
        took = time.monotonic() - t0
        assert took <= LIMIT + 1
        if signum != signal.SIGKILL:
            assert proc.returncode == 128 + signum, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        end_processes(descendants(proc.pid), grace=0.0)


def test_end_processes_escalates_to_kill() -> None:
    """A child that ignores SIGTERM is killed after the grace period."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    child.stdout.readline()
    t0 = time.monotonic()
    end_processes([child.pid], grace=0.3)
    assert child.wait(timeout=5) == -signal.SIGKILL and time.monotonic() - t0 < 3


def test_die_with_parent_ends_an_orphan(tmp_path) -> None:
    """A grandchild armed with die_with_parent ends when its parent is killed."""
    pidfile = tmp_path / "pid"
    inner = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from dllm_lit.util.workers import die_with_parent; "
             f"assert die_with_parent(); open({str(pidfile)!r}, 'w').write(str(__import__('os').getpid())); "
             "time.sleep(60)")
    outer = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {inner!r}]); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", outer])
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    parent.kill()
    parent.wait()
    assert ended_within({grandchild}, LIMIT)
