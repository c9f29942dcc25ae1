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
