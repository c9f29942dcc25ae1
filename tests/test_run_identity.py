"""A run's rows are kept only for the same code, and every config writes its own folder (issue 19, item 11)."""
from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from dllm_lit.cli import DllmCLI
from dllm_lit.util.code_identity import source_digest
from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import LLaDA, MDLM

REPO = Path(__file__).resolve().parents[1]

#: the sampler configs: a ``model:`` block naming a ``dllm_lit.samplers`` class (not fit's or decompose's configs)
SAMPLER_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml")
                         if str(((yaml.safe_load(p.read_text()) or {}).get("model") or {}).get("class_path", ""))
                         .startswith("dllm_lit.samplers."))


def _default_dir(*configs: Path) -> str:
    args = [a for c in configs for a in ("--config", str(c))]
    return str(DllmCLI(args=args, run=False).trainer.default_root_dir)


def test_every_config_has_its_own_default_folder(monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli.py"])
    folders = {c.stem: _default_dir(c) for c in SAMPLER_CONFIGS}
    assert folders == {stem: f"outputs/{stem}" for stem in folders}  # e.g. the four Dream configs, fast_dllm_factor
    assert _default_dir(REPO / "configs/mdlm.yaml", REPO / "configs/data/synthetic.yaml") == "outputs/mdlm_synthetic"


def test_code_digest_follows_the_code_a_sampler_uses() -> None:
    assert source_digest(MDLM) == source_digest(MDLM)
    assert source_digest(MDLM) != source_digest(LLaDA)
    assert len(source_digest(MDLM)) == 16


SAMPLER_SOURCE = '''
from dllm_lit.samplers import MDLM

OFFSET = {offset}


class EditedSampler(MDLM):
    """MDLM whose tokens are shifted by OFFSET (mod V): an 'edit' of the sampler's code."""

    @property
    def name(self):
        return "edited"

    def generate_with_stats(self, *args, **kwargs):
        x, stats = super().generate_with_stats(*args, **kwargs)
        return (x + OFFSET) % self.vocab_size, stats
'''


def _run(module, out: Path) -> list[dict]:
    sampler = module.EditedSampler(steps=[4])
    data = MarkovDataModule(num_sequences=8, seq_len=12, seed=3)
    predict(sampler, data, ResultsWriter(output_dir=str(out), bootstrap_resamples=0), reference=False)
    return json.loads((out / "metrics.json").read_text())["rows"]


def test_rerun_after_a_code_edit_recomputes_the_rows(tmp_path, monkeypatch) -> None:
    src = tmp_path / "edited_sampler_19b.py"
    src.write_text(textwrap.dedent(SAMPLER_SOURCE.format(offset=0)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_sampler_19b")
    try:
        first = _run(module, tmp_path / "out")
        again = _run(module, tmp_path / "out")  # unchanged code: the row is kept
        assert again == first
        src.write_text(textwrap.dedent(SAMPLER_SOURCE.format(offset=1)) + "\n")
        module = importlib.reload(module)
        with pytest.warns(UserWarning, match=r"the code of the sampler or denoiser changed since row\(s\) edited@4"):
            edited = _run(module, tmp_path / "out")
        assert edited[0]["settings"]["code"] != first[0]["settings"]["code"]
        assert edited[0]["kl"] != first[0]["kl"]  # the new code's samples, not the kept row
    finally:
        sys.modules.pop("edited_sampler_19b", None)
