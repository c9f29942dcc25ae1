"""Two-process DDP on CPU (gloo) writes the same metrics as one process on the same samples."""
from __future__ import annotations

import json

import lightning as L

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM


def _run(out, devices: int) -> list[dict]:
    dm = MarkovDataModule(num_sequences=20, seq_len=24, chunk_size=4, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=10, figures=False, num_text_examples=2)
    kwargs = dict(strategy="ddp_spawn", devices=devices) if devices > 1 else dict(devices=1)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, **kwargs)
    predict(MDLM(steps=[2, 6]), dm, writer, trainer=trainer)
    return json.loads((out / "metrics.json").read_text())["rows"]


def test_ddp_matches_single_process(tmp_path) -> None:
    single = _run(tmp_path / "one", 1)
    ddp = _run(tmp_path / "two", 2)
    assert single == ddp  # every metric, interval and row identical
    one = (tmp_path / "one" / "samples.txt").read_text()
    assert one == (tmp_path / "two" / "samples.txt").read_text()
