"""Stopping the CLI: Ctrl-C during start-up is one line without a traceback, and an interrupted run exits at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_lit.cli import dispatch as cli

REPO = Path(__file__).resolve().parents[1]
STARTUP_LINE = "stopped: interrupted by SIGINT during start-up, before any row was sampled"


def _exit_raises(monkeypatch) -> None:
    def fake_exit(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(cli, "_exit_now", fake_exit)


def test_console_main_turns_a_startup_ctrl_c_into_one_line(monkeypatch, capsys) -> None:
    _exit_raises(monkeypatch)

    def interrupted_parse(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted_parse)
    with pytest.raises(SystemExit) as exc:
        cli.console_main()
    assert exc.value.code == 130 and capsys.readouterr().err.strip().splitlines() == [STARTUP_LINE]


def test_console_main_exits_at_once_after_a_stopped_run(monkeypatch) -> None:
    _exit_raises(monkeypatch)

    def stopped(*args, **kwargs):
        raise cli.RunStopped(143)

    monkeypatch.setattr(cli, "main", stopped)
    with pytest.raises(SystemExit) as exc:
        cli.console_main()
    assert exc.value.code == 143


def _launch(out: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="disabled")
    return subprocess.Popen([sys.executable, "cli.py", "predict", "--config", "configs/llada.yaml",
                             "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(out), *extra],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigint_while_the_cli_starts_prints_one_line(tmp_path) -> None:
    proc = _launch(tmp_path / "run")
    time.sleep(1.5)  # the libraries are loading
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == [STARTUP_LINE]


@pytest.mark.slow
def test_interrupted_run_exits_within_two_seconds_of_the_stopped_line(tmp_path) -> None:
    """LLaDA at N = 512, T = 1024: before, the interpreter's teardown took 14-18 s after "stopped: ..."."""
    out = tmp_path / "run"
    proc = _launch(out)
    deadline = time.monotonic() + 300
    while not (out / "metrics.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # inside the second row
    proc.send_signal(signal.SIGINT)
    line = ""
    while not line.startswith("stopped:"):
        line = proc.stderr.readline()
        assert line, "the run ended without a stopped line"
    stopped = time.monotonic()
    proc.wait(timeout=60)
    assert time.monotonic() - stopped < 2.0 and proc.returncode == 130
    assert "rows are complete" in line
