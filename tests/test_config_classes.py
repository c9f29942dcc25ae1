"""A config never runs code: every entry point builds only the classes it documents and refuses anything else
in one line, before anything is called (dllm_lit.cli.config_classes).

Each test names a callable or a class that writes a marker file when called; the marker must not appear.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: a LightningModule (what predict's and fit's parser accept) that is neither a sampler nor the training module
TOUCH_MODULE = '''
import pathlib
import lightning as L

class Touch(L.LightningModule):
    def __init__(self, marker: str = "") -> None:
        super().__init__()
        pathlib.Path(marker).write_text("ran")
'''


def _one_line(err: str, *parts: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(p in lines[0] for p in parts), lines[0]
    return lines[0]


def _os_system(tmp_path: Path, key: str = "model") -> tuple[Path, Path]:
    marker = tmp_path / "marker"
    cfg = tmp_path / "f.yaml"
    cfg.write_text(f"{key}:\n  class_path: os.system\n  init_args:\n    command: \"touch {marker}\"\n")
    return cfg, marker


@pytest.fixture
def touch_module(tmp_path, monkeypatch) -> Path:
    (tmp_path / "touch_marker_mod.py").write_text(TOUCH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path / "marker"
    sys.modules.pop("touch_marker_mod", None)


def test_the_helper_accepts_documented_classes_only() -> None:
    from dllm_lit.cli.config_classes import documented_class
    from dllm_lit.samplers import MDLM
    from dllm_lit.sources import EnglishChars

    assert documented_class("dllm_lit.samplers.MDLM", "sampler", "model") is MDLM
    assert documented_class("MDLM", "sampler", "model") is MDLM  # a bare sampler name, as the CLI accepts
    assert documented_class("dllm_lit.sources.EnglishChars", "source", "data.source") is EnglishChars
    for path in ("os.system", "builtins.eval", "dllm_lit.sources.EnglishChars", "subprocess.Popen"):
        with pytest.raises(ValueError, match="is not a sampler"):
            documented_class(path, "sampler", "model.class_path")
    with pytest.raises(ValueError, match="cannot import 'no_such_module.X'"):
        documented_class("no_such_module.X", "sampler", "model.class_path")


@pytest.mark.parametrize("verb", ["predict", "fit"])
def test_predict_and_fit_build_no_other_lightning_module(verb, touch_module, tmp_path, capsys) -> None:
    from dllm_lit.cli import main

    with pytest.raises(SystemExit) as info:
        main([verb, "--model", "touch_marker_mod.Touch", "--model.marker", str(touch_module),
              "--data.num_sequences", "4", "--data.seq_len", "8", "--trainer.default_root_dir", str(tmp_path / "run")])
    assert info.value.code == 2
    _one_line(capsys.readouterr().err, "model.class_path", "touch_marker_mod.Touch")
    assert not touch_module.exists()


def test_predict_refuses_a_function_in_one_line(tmp_path, capsys) -> None:
    from dllm_lit.cli import main

    cfg, marker = _os_system(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["predict", "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "run")])
    assert info.value.code == 2
    _one_line(capsys.readouterr().err, "model.class_path", "'os.system'")
    assert not marker.exists()


def test_conform_refuses_a_function(tmp_path, capsys) -> None:
    from dllm_lit.experiments.conform_cli import main

    cfg, marker = _os_system(tmp_path)
    assert main(["--sampler", str(cfg), "--law", "chain"]) == 2
    _one_line(capsys.readouterr().err, "--sampler.class_path", "'os.system' is not a sampler")
    assert not marker.exists()


def test_decompose_refuses_a_function(tmp_path, capsys) -> None:
    from dllm_lit.experiments.decompose import main

    cfg, marker = _os_system(tmp_path, key="sampler")
    with pytest.raises(SystemExit) as info:
        main(["--config", str(cfg), "--output_dir", str(tmp_path / "out")])
    assert info.value.code == 2
    _one_line(capsys.readouterr().err, "sampler.class_path", "'os.system'")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_sweep_refuses_before_any_point_runs(tmp_path, capsys) -> None:
    from dllm_lit.experiments.sweep import main

    cfg, marker = _os_system(tmp_path)
    sweep = tmp_path / "grid.yaml"
    sweep.write_text(f"method: grid\nparameters:\n  config: {{value: {cfg}}}\n  num_sequences: {{values: [4, 8]}}\n")
    assert main([str(sweep), "--output_root", str(tmp_path / "points"), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, "model.class_path", "'os.system' is not a sampler")
    assert not marker.exists() and not (tmp_path / "points").exists()


def test_world_sweep_report_refuses_a_source_that_is_a_function(tmp_path, capsys) -> None:
    from dllm_lit.experiments import world_sweep

    marker = tmp_path / "marker"
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    source = {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}
    meta = {"chain": {"fingerprint": "x", "vocab_size": 27, "source": {**source, "init_args": {
        **source["init_args"], "rho": 0.5}}}, "num_sequences": 4, "seq_len": 8, "seed": 1}
    (run / "metrics.json").write_text(json.dumps({"meta": meta, "rows": []}))
    assert world_sweep.main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 2
    _one_line(capsys.readouterr().err, "meta.chain.source.class_path", "is not a chain source")
    assert not marker.exists() and not (tmp_path / "rep").exists()


def test_benchmark_loader_refuses_a_function(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.grid import build_direct

    cfg, marker = _os_system(tmp_path)
    args = argparse.Namespace(synthetic=False, num_sequences=4, seq_len=8, chunk_size=4, seed=0, accelerator="cpu")
    with pytest.raises(ValueError, match="'os.system' is not a sampler"):
        build_direct(str(cfg), args, str(tmp_path / "out"), [2])
    assert not marker.exists()
