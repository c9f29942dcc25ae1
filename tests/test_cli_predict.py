"""End-to-end: the predict command writes metrics.json / metrics.csv with the documented rows."""
from __future__ import annotations

import csv
import json

import lightning as L
import torch

from dllm_lit.engine import predict

from dllm_lit.cli import main
from dllm_lit.data import MarkovDataModule
from dllm_lit.metrics import TransitionMetrics
from dllm_lit.results import ResultsWriter
from dllm_lit.samplers import MDLM

METRICS = {"nll", "kl", "tv", "entropy", "unigram_l1", "other_mass", "support_frac", "div2", "div3", "dup_rate",
           "kl_excess", "entropy_mm", "kl_mm", "seq_kl_lower", "seq_kl_upper", "trans_kl_corrected", "kl_cs"}
#: columns without an interval (metrics.json meta.intervals.per_key says why)
NO_INTERVAL = {"dup_rate", "support_frac"}
#: floor-corrected differences: may be negative (e.g. 0 - noise), intervals contain the estimate
SIGNED = {"kl_excess", "kl_mm", "seq_kl_lower", "seq_kl_upper", "trans_kl_corrected", "kl_cs"}
#: the forward sequence KL, its prediction and bounds (opt-in: results.forward_kl; null on the reference row;
#: MDLM's argmax fill and coin-drawn rounds: no prediction, no bounds)
FORWARD = {"seq_kl_fwd", "seq_kl_fwd_theory", "seq_kl_fwd_bound_tc", "seq_kl_fwd_bound_dtc", "seq_kl_fwd_bound_mi"}
#: the sandwich (null without results.metric_options.sandwich_paths) and the certified bracket
BRACKET = {"seq_kl_iw_lower", "seq_kl_iw_upper", "seq_kl_bracket_lo", "seq_kl_bracket_hi"}
KEYS = {"sampler", "label", "steps", "seed", "nfe", "nfe_std", "settings"} | METRICS | FORWARD | BRACKET | \
    {f"{k}_ci" for k in METRICS | FORWARD | BRACKET}


def test_cli_predict_writes_metrics(tmp_path) -> None:
    main([
        "predict", "--config", "configs/mdlm.yaml", "--model.steps", "[4, 16]", "--data.num_sequences", "24",
        "--data.seq_len", "40", "--data.chunk_size", "10", "--seed_everything", "7",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
        "--results.forward_kl", "true",
    ])
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert [(r["sampler"], r["steps"]) for r in rows] == [("ar", None), ("mdlm", 4), ("mdlm", 16)]
    for r in rows:
        assert set(r) == KEYS and r["seed"] == 7
        assert all(isinstance(r[k], float) and r[k] == r[k] for k in METRICS)
        for k in METRICS - NO_INTERVAL - {"seq_kl_upper"}:
            lo, hi = r[f"{k}_ci"]
            assert lo <= r[k] <= hi and (k in SIGNED or 0 <= lo)
        assert r["dup_rate_ci"] is None and r["support_frac_ci"] is None
        # 24 sequences: no interval on the mean log-ratio (below MIN_INTERVAL_N), but [0, 0] for the exact reference
        assert r["seq_kl_upper_ci"] == ([0.0, 0.0] if r["sampler"] == "ar" else None)
        if r["sampler"] == "ar":  # declared exact: the whole bracket reads 0
            assert r["seq_kl_iw_lower"] == r["seq_kl_bracket_lo"] == r["seq_kl_bracket_hi"] == 0.0
        else:
            assert r["seq_kl_iw_lower"] is None and r["seq_kl_bracket_hi"] is None and r["seq_kl_bracket_lo"] >= 0
    assert rows[0]["kl_excess"] == 0.0 and rows[0]["seq_kl_upper"] == 0.0  # the reference row against itself
    assert rows[1]["seq_kl_upper"] > rows[2]["seq_kl_upper"] > 0
    assert rows[1]["kl"] > rows[2]["kl"]  # fewer steps, larger sampler error
    assert rows[0]["seq_kl_fwd"] is None and all(r[k] is None for r in rows for k in FORWARD - {"seq_kl_fwd"})
    for r in rows[1:]:
        lo, hi = r["seq_kl_fwd_ci"]
        assert lo <= r["seq_kl_fwd"] <= hi and r["seq_kl_fwd_theory_ci"] is None
    with open(tmp_path / "metrics.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 3 and csv_rows[0]["steps"] == "" and float(csv_rows[1]["kl_ci_high"]) >= float(csv_rows[1]["kl_ci_low"])
    saved = torch.load(tmp_path / "samples.pt", weights_only=True)
    assert saved["format"] == "dllm_lit.samples" and [r["steps"] for r in saved["rows"]] == [None, 4, 16]
    assert saved["rows"][1]["samples"].shape == (24, 40) and saved["rows"][1]["samples"].dtype == torch.uint8
    assert "=== mdlm steps=4 ===" in (tmp_path / "samples.txt").read_text()
    per_key = json.loads((tmp_path / "metrics.json").read_text())["meta"]["intervals"]["per_key"]
    assert per_key["kl"]["method"] == "centred" and per_key["seq_kl_upper"]["method"] == "skew_corrected_t"
    for key in ("kl", "nll", "entropy", "div3", "kl_bracket"):
        assert (tmp_path / "figures" / f"{key}_vs_steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_predict_independent_of_chunking(tmp_path) -> None:
    """Metrics are identical whatever the chunk size: samples depend only on (seed, index)."""
    results = []
    for chunk in (5, 13):
        dm = MarkovDataModule(num_sequences=26, seq_len=30, chunk_size=chunk, seed=11)
        writer = ResultsWriter(output_dir=str(tmp_path / f"c{chunk}"), bootstrap_resamples=20, figures=False)
        trainer = L.Trainer(callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
        predict(MDLM(steps=[3, 9]), dm, writer, trainer=trainer)
        results.append(writer.rows)
    assert results[0] == results[1]
    # and they equal a direct computation from sample()
    dm = MarkovDataModule(num_sequences=26, seq_len=30, seed=11)
    dm.setup()
    s = MDLM(steps=3)
    s.connect(dm.chain)
    m = TransitionMetrics(dm.chain)
    m.update(s.sample(26, 30, seed=11))
    assert m.compute()["kl"] == results[0][1]["kl"]


def test_bad_settings_give_one_clear_line(tmp_path, capsys) -> None:
    import pytest

    cases = [
        (["--config", "configs/remdm_conf.yaml", "--model.top_p", "1.5"], "top_p must be a number in (0, 1]"),
        (["--config", "configs/mdlm.yaml", "--data.seq_len", "1"], "data.seq_len must be an integer >= 2"),
        (["--config", "configs/llada.yaml", "--model.block_length", "100"], "block_length=100 must divide"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as info:
            main(["predict", *extra, "--data.num_sequences", "4", "--trainer.default_root_dir", str(tmp_path / "bad")])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"error: {message}" in err and "Traceback" not in err
    assert not (tmp_path / "bad" / "metrics.json").exists()
