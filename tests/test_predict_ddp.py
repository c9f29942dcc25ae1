"""Two-process DDP on CPU (gloo) writes the same metrics as one process on the same samples."""
from __future__ import annotations

import json

import lightning as L
from torch.multiprocessing.spawn import ProcessExitedException

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM


def _run(out, devices: int, num_sequences: int = 20, seq_len: int = 24, chunk_size: int = 4,
         steps: tuple[int, ...] = (2, 6), reference: bool = True, num_text_examples: int = 2) -> list[dict]:
    dm = MarkovDataModule(num_sequences=num_sequences, seq_len=seq_len, chunk_size=chunk_size, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=10, figures=False, num_text_examples=num_text_examples)
    kwargs = dict(strategy="ddp_spawn", devices=devices) if devices > 1 else dict(devices=1)
    for attempt in range(2):
        trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                            enable_model_summary=False, **kwargs)
        try:
            predict(MDLM(steps=list(steps)), dm, writer, trainer=trainer, reference=reference)
            break
        except ProcessExitedException:
            # a spawned gloo worker occasionally aborts in its C++ teardown on a loaded 2-core machine
            # ("terminate called without an active exception"); that is not what this test checks: run again
            if attempt:
                raise
            dm = MarkovDataModule(num_sequences=num_sequences, seq_len=seq_len, chunk_size=chunk_size, seed=3)
            writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=10, figures=False,
                                   num_text_examples=num_text_examples, resume=False)
    return json.loads((out / "metrics.json").read_text())["rows"]


def test_ddp_matches_single_process(tmp_path) -> None:
    single = _run(tmp_path / "one", 1)
    ddp = _run(tmp_path / "two", 2)
    assert single == ddp  # every metric, interval and row identical
    # the floor-corrected columns and the sequence-KL bracket (paired with the reference row) are among them
    assert single[0]["kl_excess"] == 0.0 and single[0]["seq_kl_upper"] == 0.0
    for row in single[1:]:
        assert all(row[k] is not None and row[f"{k}_ci"] is not None
                   for k in ("kl_excess", "entropy_mm", "kl_mm", "seq_kl_lower", "seq_kl_upper"))
    assert json.loads((tmp_path / "one" / "metrics.json").read_text())["meta"]["intervals"] == \
        json.loads((tmp_path / "two" / "metrics.json").read_text())["meta"]["intervals"]
    one = (tmp_path / "one" / "samples.txt").read_text()
    assert one == (tmp_path / "two" / "samples.txt").read_text()


def test_idle_process_when_fewer_items_than_processes(tmp_path) -> None:
    """One work item for two processes: the idle process takes a placeholder item; results equal one process."""
    small = dict(num_sequences=6, seq_len=16, chunk_size=8, steps=(4,), reference=False, num_text_examples=0)
    single = _run(tmp_path / "one", 1, **small)
    assert len(single) == 1 and single == _run(tmp_path / "two", 2, **small)
