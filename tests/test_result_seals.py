"""Committed rows are sealed (seals.json: SHA-256 of each row's values and samples); a resume keeps a row only while
its seal holds, and computes a tampered one again with one warning, giving the untampered results."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM


def _run(out: Path, save_samples: bool = True) -> tuple[list[dict], list[str]]:
    """A small run into ``out`` (reference row + MDLM at 2 and 4 steps): its rows and the warnings it gave."""
    torch.set_num_threads(1)
    dm = MarkovDataModule(num_sequences=10, seq_len=12, chunk_size=5, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=0, figures=False, num_text_examples=0,
                           save_samples=save_samples)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predict(MDLM(steps=[2, 4]), dm, writer, trainer=trainer)
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    return rows, [str(w.message) for w in caught if "seal" in str(w.message)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("clean") / "run"
    rows, _ = _run(out)
    return out, rows


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("metrics.json", "metrics.csv", "samples.pt", "seals.json"):
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_a_resume_of_untouched_rows_keeps_them_all(clean, tmp_path) -> None:
    out, rows = clean
    seals = json.loads((out / "seals.json").read_text())
    assert seals["format"] == "dllm_lit.seals" and sorted(seals["rows"]) == ["ar@None", "mdlm@2", "mdlm@4"]
    again = _copy(out, tmp_path / "run")
    before = (again / "metrics.json").read_text()
    resumed, warned = _run(again)
    assert resumed == rows and warned == [] and (again / "metrics.json").read_text() == before


def test_a_value_changed_in_metrics_json_is_computed_again(clean, tmp_path) -> None:
    out, rows = clean
    run = _copy(out, tmp_path / "run")
    data = json.loads((run / "metrics.json").read_text())
    data["rows"][1]["kl"] *= 1.5  # still valid JSON, still a plausible number
    (run / "metrics.json").write_text(json.dumps(data, indent=2))
    resumed, warned = _run(run)
    assert len(warned) == 1 and "mdlm@2 fail their seal" in warned[0] and "\n" not in warned[0]
    assert resumed == rows  # the row computed again is the untampered one
    assert f"{rows[1]['kl']}" in (run / "metrics.csv").read_text()


def test_two_flipped_bits_in_samples_pt_are_computed_again(clean, tmp_path) -> None:
    out, rows = clean
    run = _copy(out, tmp_path / "run")
    saved = torch.load(run / "samples.pt", weights_only=True)["rows"]
    target = saved[2]["samples"].numpy().tobytes()
    raw = bytearray((run / "samples.pt").read_bytes())
    at = raw.find(target)
    assert at >= 0 and raw.find(target, at + 1) < 0  # the row's tensor bytes, stored once, uncompressed
    raw[at + 3] ^= 0b01
    raw[at + 40] ^= 0b10
    (run / "samples.pt").write_bytes(bytes(raw))
    flipped = torch.load(run / "samples.pt", weights_only=True)["rows"][2]["samples"]
    assert not torch.equal(flipped, saved[2]["samples"])  # the file still loads: only the seal can tell
    resumed, warned = _run(run)
    assert len(warned) == 1 and "mdlm@4 fail their seal" in warned[0]
    assert resumed == rows
    assert torch.equal(torch.load(run / "samples.pt", weights_only=True)["rows"][2]["samples"], saved[2]["samples"])


def test_a_missing_seal_file_seals_nothing(clean, tmp_path) -> None:
    out, rows = clean
    run = _copy(out, tmp_path / "run")
    (run / "seals.json").unlink(missing_ok=True)
    resumed, warned = _run(run)
    assert resumed == rows and len(warned) == 1 and "ar@ar, mdlm@2, mdlm@4 fail their seal" in warned[0]


def test_rows_without_saved_samples_are_sealed_by_their_values(tmp_path) -> None:
    rows, _ = _run(tmp_path / "run", save_samples=False)
    resumed, warned = _run(tmp_path / "run", save_samples=False)
    assert resumed == rows and warned == []


def test_dllm_lit_warnings_print_as_one_line() -> None:
    import dllm_lit.results.writer as writer_module
    from dllm_lit.util import console

    console.configure()
    text = warnings.formatwarning("out: row(s) mdlm@2 fail their seal", UserWarning, writer_module.__file__, 245,
                                  "self._store.load_previous(...)")
    assert text == "warning: out: row(s) mdlm@2 fail their seal\n"
