"""Bad command lines end with one short line naming the field and what is allowed (exit 2), before any work."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lit.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--data.num_sequences", "4", "--data.seq_len", "16"]

CASES = [
    (["--model.steps", "abc"], "model.steps must be an integer or a list"),
    (["--data.num_sequences", "1.5"], "data.num_sequences must be an integer, got 1.5"),
    (["--model.top_p", "nan"], "model.top_p must be a finite number, got nan"),
    (["--model", "dllm_lit.samplers.Foo"], "no class 'Foo' in dllm_lit.samplers (available: AR,"),
    (["--model.stepz", "4"], "unknown option 'stepz' for dllm_lit.samplers.ReMDM (accepted: denoiser, steps,"),
    (["--data.source", "dllm_lit.sources.LocalTextChars"], "data.source: missing required option path"),
    (["--seed_everything", "-1"], "seed_everything must be an integer in [0, 4294967295]"),
    (["--model.steps", "[16, 4, 16]"], "steps must not repeat a value"),
    (["--model.top_p", "1.5"], "top_p must be a number in (0, 1], got 1.5"),
]


@pytest.mark.parametrize("extra,message", CASES)
def test_one_line_naming_the_field(extra, message, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["predict", "--config", "configs/remdm_conf.yaml", *SMALL, "--trainer.default_root_dir", str(out), *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert message in lines[0] and lines[0].startswith("error: "), err
    assert len(lines) <= 2 and "Traceback" not in err
    assert not (out / "metrics.json").exists()


def test_unscorable_smc_sandwich_is_refused_before_sampling(tmp_path, capsys) -> None:
    """A LLaDA with no path law (tie rule "random") asked for the SMC sandwich: refused by the wiring, before any
    sampling and before the output folder is written (it used to fail at the first row, after writing)."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["predict", "--config", "configs/llada.yaml", *SMALL, "--model.tie_rule", "random",
              "--results.metric_options", "{sandwich_paths: 4, sandwich_method: smc}", "--results.output_dir", str(out)])
    assert info.value.code != 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1] == ("error: sandwich_method 'smc' needs LLaDA's path law: tie_rule 'random' couples tied "
                         "positions: the path law needs 'lowest' or 'highest'"), err
    assert "Traceback" not in err and not out.exists()


def test_yaml_typo_names_the_option(tmp_path, capsys) -> None:
    cfg = tmp_path / "typo.yaml"
    cfg.write_text("model:\n  class_path: dllm_lit.samplers.MDLM\n  init_args:\n    stpes: 3\n")
    with pytest.raises(SystemExit):
        main(["predict", "--config", str(cfg), *SMALL, "--trainer.default_root_dir", str(tmp_path / "r")])
    assert "unknown option 'stpes' for dllm_lit.samplers.MDLM (accepted: denoiser, steps, decoding)" in capsys.readouterr().err


def test_missing_cuda_is_named(tmp_path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message for machines without CUDA; this one has CUDA")
    for extra, field in ((["--trainer.accelerator", "gpu"], "trainer.accelerator=gpu"),
                         (["--results.lm_device", "cuda"], "results.lm_device=cuda")):
        with pytest.raises(SystemExit):
            main(["predict", "--config", "configs/mdlm.yaml", *SMALL, "--trainer.default_root_dir", str(tmp_path), *extra])
        err = capsys.readouterr().err
        assert f"error: {field} needs a CUDA GPU" in err and "Traceback" not in err


@pytest.mark.slow  # a fresh process (6 CPU s); the same refusals run in-process above
def test_real_command_line(tmp_path) -> None:
    """The same through the real entry point in a subprocess: exit 2, one line, no traceback, no files."""
    for extra, message in (CASES[0],):  # one case: a fresh process costs 6 CPU s; the others run in-process above
        proc = subprocess.run([sys.executable, "cli.py", "predict", "--config", "configs/remdm_conf.yaml", *SMALL,
                               "--trainer.default_root_dir", str(tmp_path), *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
        assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) <= 2
    assert not (tmp_path / "metrics.json").exists()


def test_quiet_console_and_summary(tmp_path, capfd) -> None:
    """No Lightning chatter; the run ends with a table of its rows and where they were written (in-process, at the
    file descriptors, so Lightning's own handlers are captured too; a fresh process: the slow variant below)."""
    main(["predict", "--config", "configs/mdlm.yaml", *SMALL, "--model.steps", "[2]", "--trainer.default_root_dir",
          str(tmp_path), "--trainer.enable_progress_bar", "false"])
    out = capfd.readouterr()
    _assert_quiet(out.out + out.err, tmp_path)


@pytest.mark.slow  # a fresh process (7 CPU s)
def test_quiet_console_and_summary_in_a_fresh_process(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "cli.py", "predict", "--config", "configs/mdlm.yaml", *SMALL,
                           "--model.steps", "[2]", "--trainer.default_root_dir", str(tmp_path),
                           "--trainer.enable_progress_bar", "false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _assert_quiet(proc.stdout + proc.stderr, tmp_path)


def _assert_quiet(text: str, tmp_path) -> None:
    for noise in ("litlogger", "GPU available", "TPU available", "LeafSpec", "Seed set"):
        assert noise not in text
    assert "[dllm_lit] results:" in text and f"written to {tmp_path}" in text
    assert "mdlm" in text and (tmp_path / "metrics.json").exists()


def test_thread_setting_is_checked_and_does_not_change_results(tmp_path, capsys, monkeypatch) -> None:
    import json

    import torch

    monkeypatch.setenv("DLLM_LIT_THREADS", "zero")
    with pytest.raises(SystemExit):
        main(["predict", "--config", "configs/mdlm.yaml", *SMALL, "--trainer.default_root_dir", str(tmp_path / "x")])
    assert "DLLM_LIT_THREADS must be an integer >= 1, got 'zero'" in capsys.readouterr().err
    before = torch.get_num_threads()
    rows = []
    for threads in ("1", "2"):
        monkeypatch.setenv("DLLM_LIT_THREADS", threads)
        out = tmp_path / f"t{threads}"
        main(["predict", "--config", "configs/mdlm.yaml", *SMALL, "--model.steps", "[3]", "--trainer.default_root_dir",
              str(out), "--trainer.enable_progress_bar", "false", "--results.figures", "false"])
        rows.append(json.loads((out / "metrics.json").read_text()))
    assert rows[0] == rows[1] and torch.get_num_threads() == before  # restored after the run


def test_switching_the_source_on_the_command_line_starts_from_its_defaults(capsys) -> None:
    """An earlier source's same-named options (English eps 0.0) must not leak into the new source (OWT-BPE 1e-4)."""
    import yaml

    for extra, expect in ((["--data.source", "dllm_lit.sources.OpenWebTextBPE"], {"eps": 1e-4, "target_mass": 0.99}),
                          (["--data.source=dllm_lit.sources.Synthetic"], {"eps": 1e-4, "top_k": 206})):
        with pytest.raises(SystemExit):
            main(["predict", "--config", "configs/mdlm.yaml", "--config", "configs/data/english.yaml", *extra,
                  "--print_config"])
        cfg = yaml.safe_load(capsys.readouterr().out)
        init = cfg["data"]["init_args"]["source"]["init_args"]
        got = init.get("sparsity", init)
        assert {k: got[k] for k in expect} == expect
    # a value set after the switch still applies
    with pytest.raises(SystemExit):
        main(["predict", "--config", "configs/mdlm.yaml", "--config", "configs/data/english.yaml", "--data.source",
              "dllm_lit.sources.OpenWebTextBPE", "--data.source.init_args.sparsity.eps", "0.001", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["data"]["init_args"]["source"]["init_args"]["sparsity"]["eps"] == 0.001
