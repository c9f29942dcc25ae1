"""Refusals that used to be many lines are one: an unsafe or misshapen HF denoiser, a sweep file with a Python tag,
SIGTERM during start-up and during a run."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


class _RunsCode:
    """Unpickling this runs a shell command (what a malicious pytorch_model.bin holds)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def bert_dirs(tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT masked LM (hidden 16), its copy with a malicious pickle, and one with hidden-32 weights."""
    from transformers import BertConfig, BertForMaskedLM

    base = tmp_path_factory.mktemp("bert")
    cfg = dict(vocab_size=28, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
               max_position_embeddings=64)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(hidden_size=16, **cfg)).save_pretrained(base / "good")
    shutil.copytree(base / "good", base / "unsafe")
    (base / "unsafe" / "model.safetensors").unlink()
    torch.save({"weights": _RunsCode(base / "marker")}, base / "unsafe" / "pytorch_model.bin")
    BertForMaskedLM(BertConfig(hidden_size=32, **cfg)).save_pretrained(base / "misshapen")
    shutil.copy(base / "good" / "config.json", base / "misshapen" / "config.json")
    return {"good": base / "good", "unsafe": base / "unsafe", "misshapen": base / "misshapen",
            "marker": base / "marker"}


@pytest.mark.parametrize("which, message", [
    ("unsafe", "pytorch_model.bin: it holds objects a weights-only load refuses (posix.system), and unpickling them "
               "could run code"),
    ("misshapen", "its weights do not have the shapes its config.json describes (bert."),
])
def test_hf_denoiser_load_failures_are_one_line(bert_dirs, which, message, tmp_path, capfd) -> None:
    from dllm_lit.cli import main

    with pytest.raises(SystemExit) as info:
        main(["predict", "--config", "configs/mdlm.yaml", "--model.denoiser", "dllm_lit.denoisers.HFDenoiser",
              "--model.denoiser.init_args.model_name_or_path", str(bert_dirs[which]), "--data.num_sequences", "4",
              "--data.seq_len", "8", "--trainer.default_root_dir", str(tmp_path / "run")])
    assert info.value.code == 2
    captured = capfd.readouterr()
    lines = [ln for ln in (captured.out + captured.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot load the denoiser checkpoint") and message in lines[0], lines
    assert not bert_dirs["marker"].exists()


def test_sweep_file_with_a_python_tag_is_one_line(tmp_path, capsys) -> None:
    from dllm_lit.experiments.sweep import main

    marker = tmp_path / "marker"
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(f"method: grid\nparameters:\n  config: !!python/object/apply:os.system ['touch {marker}']\n")
    assert main([str(sweep)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "is not plain YAML (line 3: could not determine a constructor" in lines[0], lines
    assert not marker.exists()
    assert main([str(ROOT / "sweeps" / "paper_grid.yaml"), "--set", "seed=!!python/name:os.system", "--dry-run"]) == 2
    assert "--set seed: not plain YAML" in capsys.readouterr().err


def _predict(out: Path, delay: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "DLLM_TEST_ITEM_DELAY": str(delay), "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "cli.py", "predict", "--model", "slow_sampler.SlowMDLM",
                             "--model.steps", "[2, 4]", "--data.num_sequences", "16", "--data.seq_len", "8",
                             "--data.chunk_size", "4", "--results.figures", "false", "--trainer.enable_progress_bar",
                             "false", "--trainer.default_root_dir", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigterm_during_start_up_is_one_line(tmp_path) -> None:
    proc = _predict(tmp_path / "run", 0.0)
    time.sleep(1.5)  # the libraries are loading
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert err.strip().splitlines() == ["stopped: interrupted by SIGTERM during start-up, before any row was sampled"]


@pytest.mark.slow
def test_sigterm_during_a_run_is_one_line(tmp_path) -> None:
    out = tmp_path / "run"
    proc = _predict(out, 0.5)
    deadline = time.monotonic() + 300
    while not (out / "metrics.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.7)  # inside the first sampler row
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stopped: interrupted by SIGTERM: ") and "of 3 rows are complete" \
        in lines[0], lines
