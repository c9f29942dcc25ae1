"""What a new user meets first: the verbs, short help, fit's final validation, one-line errors (issue 19, item 13)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch

from dllm_lit.cli import main
from dllm_lit.markov import ChainError

REPO = Path(__file__).resolve().parents[1]


def _exit(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(args)
    return exc.value.code


def test_help_lists_every_verb(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    assert _exit(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("predict", "fit", "sweep", "report", "decompose"):
        assert f"\n  {verb} " in out, verb
    assert _exit([]) == 2  # no verb: the same list, as an error


def test_predict_help_has_no_training_options(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    assert _exit(["predict", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--optimizer", "--lr_scheduler", "--ckpt_path"):
        assert option not in out, option
    assert "--model.steps" in out or "--model " in out


def test_decompose_is_a_verb(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    assert _exit(["decompose", "--help"]) == 0
    assert "usage: cli.py decompose" in capsys.readouterr().out


def test_fit_shorter_than_the_validation_interval_validates_at_the_end(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    cli = main(["fit", "--config", str(REPO / "configs/train_denoiser.yaml"), "--trainer.max_steps", "2",
                "--trainer.max_time", "null", "--data.seq_len", "16", "--data.batch_size", "2",
                "--data.val_sequences", "4", "--model.hidden_size", "16", "--model.num_layers", "1",
                "--model.intermediate_size", "32", "--trainer.enable_progress_bar", "false",
                "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(tmp_path)])
    assert cli.trainer.val_check_interval == 250 and cli.trainer.global_step == 2
    metrics = cli.trainer.callback_metrics
    assert "val/kl" in metrics and torch.isfinite(metrics["val/kl"])


def test_offline_hub_dataset_fails_fast_naming_the_option(tmp_path, monkeypatch) -> None:
    """No network (the probe of the Hub's host fails): one line within seconds, not ~40 s of retries."""
    import dllm_lit.corpus.documents as documents
    from dllm_lit.sources import Text8Chars

    monkeypatch.setattr(documents, "_hub_unreachable", lambda timeout=documents.HUB_PROBE_TIMEOUT: True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    start = time.perf_counter()
    with pytest.raises(documents.DatasetUnavailableError) as exc:
        Text8Chars(dataset="dllm-lit-tests/not-a-cached-dataset").build(tmp_path / "cache")
    assert time.perf_counter() - start < 5.0
    message = str(exc.value)
    assert "\n" not in message and "--data.source.init_args.dataset" in message and "no network" in message


def test_unknown_sampler_lists_only_sampler_classes(capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    assert _exit(["predict", "--config", str(REPO / "configs/mdlm.yaml"), "--model", "dllm_lit.samplers.Nope"]) == 2
    err = capsys.readouterr().err
    names = re.search(r"available: ([^)]*)\)", err).group(1).split(", ")
    assert {"AR", "MDLM", "LLaDA", "Dream"} <= set(names)
    assert "Sampler" not in names and "top_p_filter" not in names


def test_garbage_paper_artifact_does_not_suggest_unpickling(tmp_path) -> None:
    from dllm_lit.sources import load_paper_artifact

    garbage = tmp_path / "gt.pt"
    garbage.write_bytes(b"this is not a torch file " * 20)
    with pytest.raises(ChainError) as exc:
        load_paper_artifact(garbage)
    assert "trust_pickle" not in str(exc.value) and "not a torch.save file" in str(exc.value)
    objects = tmp_path / "objects.pt"
    torch.save({"nbr_idx": torch.zeros(2, 1, dtype=torch.long), "config": ChainError("an object")}, objects)
    with pytest.raises(ChainError, match="trust_pickle true"):
        load_paper_artifact(objects)
