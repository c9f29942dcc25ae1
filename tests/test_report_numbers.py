"""Numbers and figures agree with the docs (issue 19, item 12): decompose's intervals and axis, the report's
interval wording, figure formats and LaTeX table."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dllm_lit.data import MarkovDataModule  # noqa: E402
from dllm_lit.experiments import decompose as dec  # noqa: E402
from dllm_lit.engine import predict  # noqa: E402
from dllm_lit.experiments import report  # noqa: E402
from dllm_lit.results import ResultsWriter  # noqa: E402
from dllm_lit.samplers import MDLM  # noqa: E402
from dllm_lit.sources import english_char_chain  # noqa: E402


def test_decompose_kl_intervals_contain_the_estimate_and_are_non_negative() -> None:
    chain = english_char_chain()
    for seed in range(4):  # exact chain samples: the plug-in floor whose basic interval excluded its estimate
        x = chain.sample(64, 32, seed=seed)
        estimate = dec._kl(x, chain)
        low, high = dec._centred(lambda w: dec._kl(x, chain, w), 64, 60, seed)
        assert 0.0 <= low <= estimate <= high


def test_decompose_figure_ticks_are_the_step_counts(tmp_path, monkeypatch) -> None:
    bins = [{"mask_lo": i / 10, "mask_hi": (i + 1) / 10, "kl": 0.1, "kl_ci": [0.05, 0.2], "kl_unigram": 0.4,
             "kl_unigram_ci": [0.3, 0.5]} for i in range(10)]
    steps = [{"steps": s, "sampler_kl": 0.1, "sampler_kl_ci": [0.0, 0.2], "total_kl": 0.2, "total_kl_ci": [0.1, 0.3]}
             for s in (8, 32, 128)]
    table = {"denoiser_error": {"bins": bins}, "steps": steps, "reference_kl": 0.01, "sampler": "mdlm"}
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    dec._figure(table, tmp_path / "decomposition.png")
    ax = figures[0].axes[1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "32", "128"]
    plt.close("all")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    predict(MDLM(steps=[4, 8]), MarkovDataModule(num_sequences=8, seq_len=12, seed=3),
            ResultsWriter(output_dir=str(out), bootstrap_resamples=20))
    return out


def test_report_formats_wording_and_latex(run_dir, tmp_path) -> None:
    out = tmp_path / "report"
    assert report.main([str(run_dir), "--out", str(out)]) == 0
    figures = {p.suffix for p in (out / "figures").iterdir()}
    assert {".png", ".pdf", ".svg"} <= figures  # docs promise all three
    text = (out / "report.md").read_text()
    assert "basic" not in text and "centred: kl" in text and "percentile: nll" in text
    tex = (out / "tables" / "results.tex").read_text()
    head = next(line for line in tex.splitlines() if line.startswith(r"\begin{tabular}"))
    columns = len(head.split("{")[2].rstrip("}"))
    assert columns <= 11 and r"\begin{table*}" in tex and r"\resizebox{\textwidth}" in tex


def test_kl_bracket_figure_shows_all_values_without_an_empty_negative_region(tmp_path, monkeypatch) -> None:
    from dllm_lit.results import figures as fig_mod

    rows = [{"label": "mdlm", "sampler": "mdlm", "steps": s, "kl": 0.5 / s + 0.01, "kl_excess": 0.5 / s,
             "seq_kl_lower": 0.4 / s, "seq_kl_upper": 2.0 / s} for s in (8, 32, 128)]
    rows.append({"label": "ar", "sampler": "ar", "steps": None, "kl": 0.01})
    captured = []
    monkeypatch.setattr(fig_mod.plt, "close", lambda fig=None: captured.append(fig))
    fig_mod.plot_kl_bracket(rows, tmp_path / "kl_bracket_vs_steps", formats=("png",))
    fig = captured[0]
    ax = fig.axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0.0 and top >= 2.0 / 8  # nothing negative to show; the largest value (upper end) inside
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # the legend sits beside the axes, not on them
    plt.close("all")


def test_logged_table_has_interval_columns_and_the_run_ends_complete(tmp_path) -> None:
    import lightning as L
    from lightning.pytorch.loggers.logger import Logger

    class Recorder(Logger):
        name, version = "recorder", "0"
        tables, params = [], []

        def log_metrics(self, metrics, step=None) -> None:
            pass

        def log_hyperparams(self, params, *args, **kwargs) -> None:
            self.params.append(params)

        def log_table(self, key, columns, data) -> None:
            self.tables.append((columns, data))

    rec = Recorder()
    trainer = L.Trainer(logger=rec, callbacks=[writer := ResultsWriter(output_dir=str(tmp_path), bootstrap_resamples=20)],
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        devices=1, accelerator="cpu")
    predict(MDLM(steps=[4]), MarkovDataModule(num_sequences=8, seq_len=12, seed=3), writer, trainer=trainer)
    columns, data = rec.tables[-1]
    assert {"kl", "kl_low", "kl_high", "nll_low", "nll_high"} <= set(columns)
    row = dict(zip(columns, data[-1]))
    assert row["kl_low"] <= row["kl"] <= row["kl_high"]
    assert rec.params[0]["run"]["complete"] is False and rec.params[-1]["run"]["complete"] is True
