"""The results of a predict run: metrics per (sampler, steps) row and the files a run writes.

:class:`ResultsWriter` keeps, for every row of the model's grid, torchmetrics objects that are
updated as work items finish on each process: :class:`TransitionMetrics` (count states summed
across processes), 2- and 3-gram diversity, duplication rate, and optionally GenPPL and MAUVE on
texts decoded by the data module.  At the end of predict the metrics are computed (synchronised
across processes), the samples are gathered to rank 0, and rank 0 writes into ``output_dir``
(default: the trainer's ``default_root_dir``), every file atomically:

- ``metrics.json`` - a list of rows {sampler, steps, seed, nll, kl, tv, entropy, unigram_l1,
  other_mass, support_frac, div2, div3, dup_rate[, genppl][, mauve]}, each metric with
  ``<key>_ci: [low, high]`` (percentile bootstrap over sequences; ``null`` for dup_rate, whose
  value under resampling-with-replacement is biased by the duplicates resampling creates, and for
  MAUVE, which would need a k-means fit per resample);
- ``metrics.csv`` - the same rows, intervals as ``<key>_ci_low`` / ``<key>_ci_high`` columns;
- ``samples.pt`` - {"format": "dllm_lit.samples", "version": 1, "rows": [{sampler, steps, seed,
  samples: uint8/int16 [N, T]}]};
- ``samples.txt`` - a few decoded samples per row;
- ``figures/<key>_vs_steps.png`` - KL, NLL, entropy and 3-gram diversity against steps.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback

from dllm_lit.atomic import atomic_torch_save, atomic_write_text
from dllm_lit.metrics.bootstrap import ratio_ci
from dllm_lit.metrics.surface import DuplicationRate, NgramDiversity, distinct_ngrams_per_sequence
from dllm_lit.metrics.transition import METRIC_KEYS, TransitionMetrics, bootstrap_transition_cis

__all__ = ["ResultsWriter", "atomic_write_text", "SAMPLES_FORMAT"]

SAMPLES_FORMAT = "dllm_lit.samples"


def _row_key(sampler: str, steps: int | None) -> str:
    return f"{sampler}@{'ar' if steps is None else steps}"


def _float(x: Any) -> float:
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)


class ResultsWriter(Callback):
    """Accumulate metrics per (sampler, steps) row during predict and write the run's files.

    Args:
        output_dir: where files go (default ``trainer.default_root_dir``).
        bootstrap_resamples: resamples for the confidence intervals (0 disables them).
        confidence: interval level.
        num_text_examples: decoded samples per row in ``samples.txt``.
        save_samples: write ``samples.pt``.
        figures: write the PNG figures.
        genppl_model: Hugging Face causal LM for GenPPL (the paper used ``gpt2-large``); None disables.
        genppl_batch_size: texts per GenPPL forward pass.
        mauve_featurizer: model whose features MAUVE compares (paper: ``gpt2-large``); None disables.
        mauve_num_reference: reference texts (exact chain samples, decoded); default N.
        mauve_num_buckets: k-means buckets (paper: 25) or "auto".
        max_text_length: token cap for GenPPL and MAUVE (paper: 1024).
        lm_device: device for the language models (default: the sampler's device).
        cache_dir: MAUVE reference-feature cache (default: the data module's cache_dir).
    """

    def __init__(
        self,
        output_dir: str | None = None,
        bootstrap_resamples: int = 200,
        confidence: float = 0.95,
        num_text_examples: int = 5,
        save_samples: bool = True,
        figures: bool = True,
        genppl_model: str | None = None,
        genppl_batch_size: int = 8,
        mauve_featurizer: str | None = None,
        mauve_num_reference: int | None = None,
        mauve_num_buckets: int | str = 25,
        max_text_length: int = 1024,
        lm_device: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        if bootstrap_resamples < 0 or bootstrap_resamples == 1:
            raise ValueError(f"bootstrap_resamples must be 0 (off) or >= 2, got {bootstrap_resamples}")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
        if num_text_examples < 0:
            raise ValueError(f"num_text_examples must be >= 0, got {num_text_examples}")
        self.output_dir = output_dir
        self.bootstrap_resamples = bootstrap_resamples
        self.confidence = confidence
        self.num_text_examples = num_text_examples
        self.save_samples = save_samples
        self.figures = figures
        self.genppl_model = genppl_model
        self.genppl_batch_size = genppl_batch_size
        self.mauve_featurizer = mauve_featurizer
        self.mauve_num_reference = mauve_num_reference
        self.mauve_num_buckets = mauve_num_buckets
        self.max_text_length = max_text_length
        self.lm_device = lm_device
        self.cache_dir = cache_dir
        self.rows: list[dict[str, Any]] = []
        self.plan = None

    def connect(self, plan, chain, decoder=None, reference_samples=None, run_info: dict[str, Any] | None = None) -> None:
        """Wire the run: its plan (rows, N, T, seed), the chain, the text decoder and the MAUVE references.

        ``reference_samples(n)`` returns n exact chain samples disjoint from the plan's rows.
        """
        if self.mauve_featurizer and reference_samples is None:
            raise ValueError("MAUVE needs reference samples (mauve_featurizer was set): wire the run with a data module")
        if (self.genppl_model or self.mauve_featurizer) and decoder is None:
            raise ValueError("GenPPL / MAUVE need a text decoder for the chain's tokens: wire the run with a data module")
        self.plan, self.chain, self.decoder = plan, chain, decoder
        self.reference_samples = reference_samples
        self.run_info = dict(run_info or {})

    # ------------------------------------------------------------------ accumulation
    def _metrics_for_row(self, chain, reference_texts: list[str] | None, device: str | None, cache_dir: str | None) -> dict[str, Any]:
        m: dict[str, Any] = {
            "transition": TransitionMetrics(chain),
            "div2": NgramDiversity(2),
            "div3": NgramDiversity(3),
            "dup_rate": DuplicationRate(),
        }
        if self.genppl_model:
            from dllm_lit.metrics.language_model import GenerativePerplexity

            m["genppl"] = GenerativePerplexity(self.genppl_model, batch_size=self.genppl_batch_size,
                                               max_length=self.max_text_length, device=device)
        if self.mauve_featurizer:
            from dllm_lit.metrics.language_model import MauveScore

            m["mauve"] = MauveScore(reference_texts, featurizer=self.mauve_featurizer, max_text_length=self.max_text_length,
                                    num_buckets=self.mauve_num_buckets, device=device, cache_dir=cache_dir)
        return m

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan is None:
            raise ValueError("the results writer is not wired: call dllm_lit.engine.connect(...) before predict")
        self._decoder = self.decoder if (self.genppl_model or self.mauve_featurizer or self.num_text_examples) else None
        reference_texts = None
        if self.mauve_featurizer:
            ref = self.reference_samples(self.mauve_num_reference)
            reference_texts = self._decoder.decode_batch(ref)
        device = self.lm_device or str(pl_module.device)
        data_cache = self.run_info.get("cache_dir")
        cache_dir = self.cache_dir or (str(Path(data_cache) / "mauve") if data_cache else None)
        self._order: list[tuple[str, int | None]] = [(r.name, r.steps) for r in self.plan.rows]
        self.metrics = {_row_key(s, k): self._metrics_for_row(self.chain, reference_texts, device, cache_dir) for s, k in self._order}
        self._chunks: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {key: [] for key in self.metrics}

    def on_predict_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Name the row being sampled in the progress bar, e.g. ``mdlm steps=64``."""
        bar = getattr(trainer.progress_bar_callback, "predict_progress_bar", None)
        if bar is not None and isinstance(batch, dict) and self.plan is not None:
            row = self.plan.rows[int(batch["row"])]
            bar.set_description(f"{row.name} " + ("AR" if row.steps is None else f"steps={row.steps}"))

    def on_predict_batch_end(self, trainer, pl_module, outputs: dict[str, Any], batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        row = self.plan.rows[int(outputs["row"])]
        key = _row_key(row.name, row.steps)
        x = outputs["samples"]
        metrics = self.metrics[key]
        for name in ("transition", "div2", "div3", "dup_rate"):
            metrics[name].update(x)
        if "genppl" in metrics or "mauve" in metrics:
            texts = self._decoder.decode_batch(x.long())
            for name in ("genppl", "mauve"):
                if name in metrics:
                    metrics[name].update(texts)
        self._chunks[key].append((outputs["index"], x))

    # ------------------------------------------------------------------ end of predict
    def _gather_samples(self, key: str) -> torch.Tensor:
        chunks = self._chunks[key]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, chunks)
            chunks = [c for part in gathered for c in part]
        chunks = sorted(chunks, key=lambda c: int(c[0][0]))
        return torch.cat([x for _, x in chunks]) if chunks else torch.zeros(0, 0, dtype=torch.uint8)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seed = int(self.plan.seed)
        rows, all_samples = [], []
        for sampler, steps in self._order:
            key = _row_key(sampler, steps)
            m = self.metrics[key]
            row: dict[str, Any] = {"sampler": sampler, "steps": steps, "seed": seed}
            values = m["transition"].compute()  # collective: every process computes every row in order
            row.update({k: values[k] for k in METRIC_KEYS})
            for name in ("div2", "div3", "dup_rate", "genppl", "mauve"):
                if name in m:
                    row[name] = _float(m[name].compute())
            samples = self._gather_samples(key)
            if "genppl" in m and self.bootstrap_resamples:  # collective: on every process
                row["genppl_ci"] = list(m["genppl"].bootstrap_ci(num_resamples=self.bootstrap_resamples,
                                                                 confidence=self.confidence, seed=seed or 0))
            if trainer.is_global_zero:
                self._add_intervals(row, m, samples, self.chain, seed or 0)
            rows.append(row)
            all_samples.append(samples)
        self.rows = rows
        if trainer.is_global_zero:
            out = Path(self.output_dir or trainer.default_root_dir)
            self.write(rows, out)
            self._write_samples(rows, all_samples, out)
            if self.figures:
                from dllm_lit.results.figures import write_figures

                write_figures(rows, out)
            self.log_rows(trainer, rows)

    def _add_intervals(self, row: dict[str, Any], m: dict[str, Any], samples: torch.Tensor, chain, seed: int) -> None:
        if self.bootstrap_resamples == 0:
            return
        R, conf = self.bootstrap_resamples, self.confidence
        x = samples.long()
        cis = bootstrap_transition_cis(x, chain, num_resamples=R, confidence=conf, seed=seed)
        for k in METRIC_KEYS:
            row[f"{k}_ci"] = list(cis[k])
        for n in (2, 3):  # rank 0 only, on the gathered samples: no collectives here
            distinct = distinct_ngrams_per_sequence(x, n).double()
            windows = torch.full_like(distinct, x.shape[1] - n + 1)
            row[f"div{n}_ci"] = list(ratio_ci(distinct, windows, num_resamples=R, confidence=conf, seed=seed))
        row["dup_rate_ci"] = None
        if "mauve" in m:
            row["mauve_ci"] = None

    # ------------------------------------------------------------------ files
    @staticmethod
    def write(rows: list[dict[str, Any]], out: Path) -> None:
        """metrics.json (rows as they are) and metrics.csv (intervals split into two columns)."""
        atomic_write_text(out / "metrics.json", json.dumps(rows, indent=2) + "\n")
        flat_rows = []
        for r in rows:
            flat: dict[str, Any] = {}
            for k, v in r.items():
                if k.endswith("_ci"):
                    flat[f"{k}_low"], flat[f"{k}_high"] = (v if v is not None else ("", ""))
                else:
                    flat[k] = "" if v is None else v
            flat_rows.append(flat)
        fields: list[str] = []
        for fr in flat_rows:
            fields += [k for k in fr if k not in fields]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fields or ["sampler", "steps", "seed", *METRIC_KEYS], restval="")
        w.writeheader()
        w.writerows(flat_rows)
        atomic_write_text(out / "metrics.csv", buf.getvalue())

    def _write_samples(self, rows: list[dict[str, Any]], samples: list[torch.Tensor], out: Path) -> None:
        if self.save_samples:
            payload = {"format": SAMPLES_FORMAT, "version": 1,
                       "rows": [{"sampler": r["sampler"], "steps": r["steps"], "seed": r["seed"], "samples": x}
                                for r, x in zip(rows, samples)]}
            atomic_torch_save(payload, out / "samples.pt")
        if self.num_text_examples and self._decoder is not None:
            parts = []
            for r, x in zip(rows, samples):
                label = f"{r['sampler']} " + ("AR (exact chain samples)" if r["steps"] is None else f"steps={r['steps']}")
                texts = self._decoder.decode_batch(x[: self.num_text_examples].long())
                parts.append(f"=== {label} ===\n" + "\n".join(f"[{i}] {t}" for i, t in enumerate(texts)))
            atomic_write_text(out / "samples.txt", "\n\n".join(parts) + "\n")

    @staticmethod
    def log_rows(trainer: L.Trainer, rows: list[dict[str, Any]]) -> None:
        """Send every row to the trainer's loggers (W&B: one metric series per sampler plus a table)."""
        for logger in trainer.loggers:
            for r in rows:
                numeric = {f"{r['sampler']}/{k}": v for k, v in r.items() if isinstance(v, float)}
                logger.log_metrics(numeric, step=0 if r["steps"] is None else int(r["steps"]))
            if hasattr(logger, "log_table") and rows:
                cols = [c for c in rows[0].keys() if not c.endswith("_ci")]
                logger.log_table(key="results", columns=cols, data=[[r[c] for c in cols] for r in rows])
