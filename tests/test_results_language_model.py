"""GenPPL and MAUVE through the predict results, for real, with a tiny randomly initialised GPT-2."""
from __future__ import annotations

import json

import lightning as L
import torch

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM
from tiny_models import build_tiny_gpt2


def test_predict_with_genppl_and_mauve(tmp_path) -> None:
    torch.set_num_threads(1)
    model_dir = str(build_tiny_gpt2(tmp_path / "tiny-gpt2"))
    dm = MarkovDataModule(num_sequences=24, seq_len=40, chunk_size=8, seed=5, cache_dir=str(tmp_path / "cache"))
    writer = ResultsWriter(output_dir=str(tmp_path / "out"), bootstrap_resamples=20, figures=False,
                           genppl_model=model_dir, mauve_featurizer=model_dir, mauve_num_buckets=4, max_text_length=100)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
    predict(MDLM(steps=[2]), dm, writer, trainer=trainer)
    rows = json.loads((tmp_path / "out" / "metrics.json").read_text())["rows"]
    for r in rows:
        assert r["genppl"] > 1.0 and r["genppl_ci"][0] <= r["genppl"] <= r["genppl_ci"][1]
        assert 0.0 < r["mauve"] <= 1.0 and r["mauve_ci"] is None
    # the reference features were cached on disk for the next run
    assert any((tmp_path / "cache" / "mauve").iterdir())


def test_genppl_model_without_tokenizer_is_refused_before_sampling(tmp_path) -> None:
    """A model folder saved without its tokenizer used to give GenPPL ~ 29.4 for every row; now one clear error."""
    import shutil

    import pytest

    from dllm_lit.metrics.lm_loading import ModelNotAvailableError, clear_model_cache

    model_dir = build_tiny_gpt2(tmp_path / "tiny-gpt2")
    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for f in model_dir.iterdir():
        if f.name in ("config.json", "model.safetensors", "pytorch_model.bin", "generation_config.json"):
            shutil.copy(f, bare / f.name)
    clear_model_cache()
    dm = MarkovDataModule(num_sequences=4, seq_len=16, chunk_size=4, seed=5, cache_dir=str(tmp_path / "cache"))
    writer = ResultsWriter(output_dir=str(tmp_path / "out"), bootstrap_resamples=0, figures=False, genppl_model=str(bare))
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ModelNotAvailableError, match="no tokenizer files"):
        predict(MDLM(steps=[2]), dm, writer, trainer=trainer)
    assert not (tmp_path / "out" / "metrics.json").exists()
