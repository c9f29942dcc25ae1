"""What a new user hit in a first hour (issue 40, item 5): each one-line fix, checked as the user met it."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from dllm_lit.cli import USAGE, main
from dllm_lit.experiments import COMMANDS

REPO = Path(__file__).resolve().parents[1]


def test_help_lists_every_verb(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ") and
              not line.strip().startswith("python")}
    assert {"predict", "fit", *COMMANDS} <= listed and "conform" in USAGE


def test_a_module_off_the_path_gets_a_hint(tmp_path, capsys) -> None:
    from dllm_lit.experiments.conform_cli import main as conform

    assert conform(["--sampler", "top_two.TopTwo", "--law", "chain"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "No module named 'top_two'" in err and "top_two.py" in err and "PYTHONPATH=." in err
    with pytest.raises(SystemExit):
        main(["predict", "--model", "top_two.TopTwo", "--trainer.default_root_dir", str(tmp_path)])
    assert "PYTHONPATH=." in capsys.readouterr().err


def test_a_text_file_as_checkpoint_says_why_without_torchs_advice(tmp_path) -> None:
    from dllm_lit.denoisers import CheckpointDenoiser, DenoiserLoadError

    bad = tmp_path / "notes.ckpt"
    bad.write_text((REPO / "README.md").read_text()[:2000])
    with pytest.raises(DenoiserLoadError) as exc:
        CheckpointDenoiser(str(bad))
    text = str(exc.value)
    assert "\n" not in text and "not a readable torch file" in text and "weights_only" not in text


def test_an_output_folder_that_is_a_file_names_the_option_given(tmp_path, capsys) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    for option in ("--trainer.default_root_dir", "--results.output_dir"):
        with pytest.raises(SystemExit):
            main(["predict", "--config", "configs/mdlm.yaml", option, str(target), "--data.num_sequences", "4",
                  "--data.seq_len", "8"])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == f"error: {option[2:]} '{target}' is a file, not a folder: give another {option[2:]}"


def test_reports_and_outputs_are_ignored_by_git() -> None:
    ignored = set((REPO / ".gitignore").read_text().split())
    assert {"outputs/", "reports/"} <= ignored


def test_external_rows_have_short_labels_and_figures_fit(tmp_path) -> None:
    """The example's row label names its options, not its bookkeeping; every legend entry fits, no layout warning."""
    from dllm_lit.engine.plan import row_label
    from dllm_lit.results.figures import LEGEND_CHARS, write_figures
    from dllm_lit.samplers import ExternalSampler

    s = ExternalSampler(generate="examples.llada_generate:generate", steps=[8],
                        kwargs={"block_length": 32, "temperature": 1.0})
    assert row_label(s) == "external_generate[kwargs=block_length:32,temperature:1]"
    long = "external_generate[" + ",".join(f"option_{i}={i}" for i in range(12)) + "]"
    rows = [{"sampler": "ar", "label": "ar", "steps": None, "kl": 0.3, "kl_excess": 0.0, "nfe": None}]
    rows += [{"sampler": "x", "label": long, "steps": n, "nfe": float(n), "kl": 1.0 / n, "kl_excess": 0.5 / n,
              "seq_kl_lower": 0.1 / n, "seq_kl_upper": None, "nll": 2.0, "entropy": 2.0, "div3": 0.9}
             for n in (8, 16)]
    import matplotlib.pyplot as plt

    seen: list[list[str]] = []
    real = plt.Axes.legend

    def spy(ax, *args, **kwargs):
        legend = real(ax, *args, **kwargs)
        seen.append([t.get_text() for t in legend.get_texts()])
        return legend

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" would fail here
        plt.Axes.legend = spy
        try:
            paths = write_figures(rows, tmp_path)
        finally:
            plt.Axes.legend = real
    assert paths and seen and all(len(t) <= LEGEND_CHARS for texts in seen for t in texts)
    assert any(t.endswith(": plug-in KL") for texts in seen for t in texts)  # the kind of line survives the cut


def test_a_resumed_run_names_the_rows_it_kept_without_a_dataloader_warning(tmp_path, recwarn) -> None:
    import logging

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("dllm_lit").addHandler(handler)
    argv = ["predict", "--config", "configs/mdlm.yaml", "--model.steps", "[4]", "--data.num_sequences", "4",
            "--data.seq_len", "8", "--trainer.default_root_dir", str(tmp_path), "--results.figures", "false",
            "--trainer.enable_progress_bar", "false"]
    try:
        main(argv)
        assert not any(line.startswith("resume:") for line in lines)
        recwarn.clear()
        main(argv)
    finally:
        logging.getLogger("dllm_lit").removeHandler(handler)
    assert any(f"resume: kept 2 of 2 rows of {tmp_path} with these settings (ar@ar, mdlm@4); sampling none" in line
               for line in lines)
    assert not [w for w in recwarn if "DataLoader" in str(w.message)]


def test_fit_progress_shows_a_real_epoch_count(monkeypatch) -> None:
    """Lightning's bar prints "Epoch i/{max_epochs - 1}": max_epochs -1 (max_steps alone) printed "Epoch 0/-2"."""
    from dllm_lit.cli import DllmCLI

    monkeypatch.setattr("sys.argv", ["cli.py"])
    cli = DllmCLI(args=["--config", str(REPO / "configs/train_denoiser.yaml")], run=False)
    assert cli.trainer.max_epochs == 1 and cli.trainer.max_steps == 4000
