"""Two-process DDP on CPU (gloo) writes the same metrics as one process on the same samples.

The spawned workers must also exit cleanly: a gloo group left alive at exit aborted a worker in about
one launch in ten (see dllm_lit.engine.process_group), so these tests run each launch once, without retry.
"""
from __future__ import annotations

import json

import lightning as L
import pytest
import torch.distributed as dist

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM


def _run(out, devices: int, num_sequences: int = 20, seq_len: int = 24, chunk_size: int = 4,
         steps: tuple[int, ...] = (2, 6), reference: bool = True, num_text_examples: int = 2) -> list[dict]:
    dm = MarkovDataModule(num_sequences=num_sequences, seq_len=seq_len, chunk_size=chunk_size, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=10, figures=False, num_text_examples=num_text_examples)
    kwargs = dict(strategy="ddp_fork", devices=devices) if devices > 1 else dict(devices=1)  # fork: no re-imports
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, **kwargs)
    predict(MDLM(steps=list(steps)), dm, writer, trainer=trainer, reference=reference)
    return json.loads((out / "metrics.json").read_text())["rows"]


def test_ddp_matches_single_process(tmp_path) -> None:
    single = _run(tmp_path / "one", 1)
    ddp = _run(tmp_path / "two", 2)
    assert single == ddp  # every metric, interval and row identical
    # the floor-corrected columns and the sequence-KL bracket (paired with the reference row) are among them
    assert single[0]["kl_excess"] == 0.0 and single[0]["seq_kl_upper"] == 0.0
    for row in single[1:]:
        assert all(row[k] is not None and row[f"{k}_ci"] is not None
                   for k in ("kl_excess", "entropy_mm", "kl_mm", "seq_kl_lower", "trans_kl_corrected", "kl_cs"))
        assert row["seq_kl_upper"] is not None and row["seq_kl_upper_ci"] is None  # no interval below 32 sequences
    assert json.loads((tmp_path / "one" / "metrics.json").read_text())["meta"]["intervals"] == \
        json.loads((tmp_path / "two" / "metrics.json").read_text())["meta"]["intervals"]
    one = (tmp_path / "one" / "samples.txt").read_text()
    assert one == (tmp_path / "two" / "samples.txt").read_text()


@pytest.mark.slow  # a second two-process run (16 CPU s); test_ddp_matches_single_process runs the DDP path by default
def test_idle_process_when_fewer_items_than_processes(tmp_path) -> None:
    """One work item for two processes: the idle process takes a placeholder item; results equal one process."""
    small = dict(num_sequences=6, seq_len=16, chunk_size=8, steps=(4,), reference=False, num_text_examples=0)
    single = _run(tmp_path / "one", 1, **small)
    assert len(single) == 1 and single == _run(tmp_path / "two", 2, **small)


def test_release_process_group_only_for_lightning_launched_ddp(tmp_path, monkeypatch) -> None:
    """The group is destroyed for a DDP strategy with Lightning's own environment; left alone otherwise."""
    from lightning.fabric.plugins.environments import LightningEnvironment, TorchElasticEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    from dllm_lit.engine.process_group import release_process_group

    for key, value in dict(LOCAL_RANK="0", RANK="0", GROUP_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                           MASTER_ADDR="127.0.0.1", MASTER_PORT="29999", TORCHELASTIC_RUN_ID="test").items():
        monkeypatch.setenv(key, value)  # what torchrun sets for its one process
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        single = L.Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path)
        elastic = L.Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path,
                            strategy=DDPStrategy(cluster_environment=TorchElasticEnvironment()))
        assert not release_process_group(None)
        assert not release_process_group(single) and not release_process_group(elastic)
        assert dist.is_initialized()
        ddp = L.Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path,
                        strategy=DDPStrategy(cluster_environment=LightningEnvironment()))
        assert release_process_group(ddp) and not dist.is_initialized()
        assert not release_process_group(ddp)  # nothing left to release
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.slow  # three 2-process launches: about 40 CPU s
def test_ddp_commits_each_row_as_it_finishes_and_resumes_identically(tmp_path, monkeypatch) -> None:
    """A 2-process run that fails in its last row has its finished rows on disk (it had none before: DDP committed
    at the end); the rerun keeps them and ends with the rows of an uninterrupted single-process run."""
    from slow_sampler import SlowMDLM

    def run(out, devices: int) -> None:
        dm = MarkovDataModule(num_sequences=8, seq_len=12, chunk_size=2, seed=3)
        writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=0, figures=False, num_text_examples=0)
        kwargs = dict(strategy="ddp_spawn", devices=devices) if devices > 1 else dict(devices=1)
        trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                            enable_model_summary=False, **kwargs)
        predict(SlowMDLM(steps=[2, 4, 8]), dm, writer, trainer=trainer)

    monkeypatch.setenv("DLLM_TEST_FAIL_STEPS", "8")
    with pytest.raises(Exception, match="test failure at steps=8"):
        run(tmp_path / "two", 2)
    partial = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert [(r["label"], r["steps"]) for r in partial["rows"]] == [("ar", None), ("slow_mdlm", 2), ("slow_mdlm", 4)]
    assert partial["meta"]["complete"] is False
    monkeypatch.delenv("DLLM_TEST_FAIL_STEPS")
    run(tmp_path / "two", 2)
    run(tmp_path / "one", 1)
    resumed = json.loads((tmp_path / "two" / "metrics.json").read_text())["rows"]
    assert resumed[:3] == partial["rows"] and resumed == json.loads((tmp_path / "one" / "metrics.json").read_text())["rows"]
