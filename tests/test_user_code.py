"""A user's sampler can neither end a run as a success (SystemExit) nor hang it (timeouts): one line, nonzero exit."""
from __future__ import annotations

import json
import signal
import time

import pytest
import torch

ONE_STEP = ("{class_path: dllm_lit.samplers.ExternalSampler, init_args: {generate: 'external_samplers:%s', "
            "steps: 2%s}}")
CONFORM = ["--law", "chain", "--samples", "40", "--seq-len", "3", "--chunk", "20"]


def _err_line(capsys) -> str:
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_conform_gives_no_verdict_when_the_sampler_exits(capsys) -> None:
    from dllm_lit.experiments.conform_cli import main

    assert main(["--sampler", ONE_STEP % ("exits", "")] + CONFORM) == 2
    assert "external_samplers:exits raised SystemExit(0)" in _err_line(capsys)


def test_conform_timeout_ends_a_hanging_sampler(capsys) -> None:
    from dllm_lit.experiments.conform_cli import main

    started = time.monotonic()
    assert main(["--sampler", ONE_STEP % ("hangs", ""), "--timeout", "0.5"] + CONFORM) == 2
    assert time.monotonic() - started < 30
    assert "did not finish within 0.5 s (--timeout)" in _err_line(capsys)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)  # the timer's handler is gone again
    assert main(["--sampler", ONE_STEP % ("hangs", ""), "--timeout", "nan"] + CONFORM) == 2
    assert "--timeout must be a number of seconds > 0" in _err_line(capsys)


def test_external_sampler_timeout_and_exit(chain) -> None:
    from dllm_lit.samplers import ExternalSampler
    from dllm_lit.samplers.external import ExternalSamplerError

    hanging = ExternalSampler(steps=2, generate="external_samplers:hangs", timeout=0.3).connect(chain)
    with pytest.raises(ExternalSamplerError, match=r"^external_samplers:hangs did not finish within 0.3 s \(timeout\)$"):
        hanging.generate(torch.arange(2), 3, 2, 0)
    exiting = ExternalSampler(steps=2, generate="external_samplers:exits").connect(chain)
    with pytest.raises(ExternalSamplerError, match=r"^external_samplers:exits raised SystemExit\(0\)"):
        exiting.generate(torch.arange(2), 3, 2, 0)
    # a time limit changes no sample: not part of the row's settings or label
    assert hanging.settings() == ExternalSampler(steps=2, generate="external_samplers:hangs").connect(chain).settings()
    with pytest.raises(ValueError, match="timeout must be"):
        ExternalSampler(steps=2, generate="external_samplers:hangs", timeout=0)


@pytest.mark.parametrize("model", [
    ["--model", "dllm_lit.samplers.ExternalSampler", "--model.generate", "external_samplers:exits"],
    ["--model", "external_samplers.ExitingMDLM"],
])
def test_predict_fails_when_the_sampler_exits(model, tmp_path, monkeypatch, capsys) -> None:
    from dllm_lit.cli import main

    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as ex:
        main(["predict", *model, "--model.steps", "[2]", "--data.num_sequences", "8", "--data.seq_len", "6",
              "--trainer.default_root_dir", str(out), "--results.figures", "false",
              "--trainer.enable_progress_bar", "false"])
    assert ex.value.code == 2
    assert "raised SystemExit(0): the user's code may not end the run" in capsys.readouterr().err.strip().splitlines()[-1]
    meta = json.loads((out / "metrics.json").read_text())["meta"]
    assert meta["complete"] is False  # the reference row is on disk; the run is not marked complete


def test_nested_limits_share_one_timer() -> None:
    from dllm_lit.util.user_code import UserCodeError, user_code

    with pytest.raises(UserCodeError, match="inner did not finish within 0.2 s"):
        with user_code("outer", 30.0):
            with user_code("inner", 0.2):
                while True:
                    time.sleep(0.01)
    with pytest.raises(UserCodeError, match="outer did not finish within 0.2 s"):
        with user_code("outer", 0.2):
            with user_code("inner", 30.0):
                while True:
                    time.sleep(0.01)
    with user_code("quick", 5.0):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
