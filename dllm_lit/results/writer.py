"""The results of a predict run: metrics per (sampler, steps) row and the files a run writes.

:class:`ResultsWriter` keeps, for every row of the run's plan, one metric per enabled entry of the
results registry (:data:`dllm_lit.results.registry.METRICS`), each wrapped with its bootstrap
interval (:class:`~dllm_lit.metrics.bootstrap.SequenceBootstrapper`) and updated as work items
finish on each process, with the samples or with their decoded texts.  At the end of predict the
metrics and intervals are computed (synchronised across processes), the samples are gathered to
rank 0, and rank 0 writes into ``output_dir`` (default: the trainer's ``default_root_dir``), every
file atomically:

- ``metrics.json`` - a list of rows {sampler, steps, seed, <every registered key>}, each key with
  ``<key>_ci: [low, high]`` under the metric's interval policy (``null`` for a metric without
  one; no ``_ci`` entries when intervals are off); by default nll, kl, tv, entropy, unigram_l1,
  other_mass, support_frac, div2, div3, dup_rate[, genppl][, mauve] (see ``docs/metrics.md``);
- ``metrics.csv`` - the same rows, intervals as ``<key>_ci_low`` / ``<key>_ci_high`` columns;
- ``intervals.json`` - when intervals are on: the level, the resamples and every key's interval
  method (``{"columns": {key: {"method": "centred" | "percentile" | "basic" | null, ...}}}``);
- ``samples.pt`` - {"format": "dllm_lit.samples", "version": 1, "rows": [{sampler, steps, seed,
  samples: uint8/int16 [N, T]}]};
- ``samples.txt`` - a few decoded samples per row;
- ``figures/<key>_vs_steps.png`` - the registry's figure keys (KL, NLL, entropy, 3-gram diversity)
  against steps.
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

from dllm_lit import checks
from dllm_lit.atomic import atomic_torch_save, atomic_write_text
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.results import registry

__all__ = ["ResultsWriter", "atomic_write_text", "SAMPLES_FORMAT"]

SAMPLES_FORMAT = "dllm_lit.samples"


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
        mauve_num_seeds: k-means seeds MAUVE is repeated over (``mauve`` is the first, seed 25; plus
            ``mauve_seed_mean`` and ``mauve_seed_std``).
        max_text_length: token cap for GenPPL and MAUVE (paper: 1024).
        lm_device: device for the language models (default: the sampler's device).
        cache_dir: MAUVE reference-feature cache (default: ``<the data module's cache_dir>/mauve``).

    Which metrics a row holds is data: the enabled entries of :data:`dllm_lit.results.registry.METRICS`.
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
        mauve_num_seeds: int = 3,
        max_text_length: int = 1024,
        lm_device: str | None = None,
        cache_dir: str | None = None,
    ) -> None:
        if checks.integer("bootstrap_resamples", bootstrap_resamples, minimum=0) == 1:
            raise ValueError(f"bootstrap_resamples must be 0 (off) or >= 2, got {bootstrap_resamples}")
        checks.real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
        checks.integer("num_text_examples", num_text_examples, minimum=0)
        checks.integer("mauve_num_seeds", mauve_num_seeds)
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
        self.mauve_num_seeds = mauve_num_seeds
        self.max_text_length = max_text_length
        self.lm_device = lm_device
        self.cache_dir = cache_dir
        self.rows: list[dict[str, Any]] = []
        self.plan = None

    def connect(self, plan, chain, decoder=None, reference_samples=None, run_info: dict[str, Any] | None = None) -> None:
        """Wire the run: its plan (rows, N, T, seed), the chain, the text decoder and the MAUVE references.

        ``reference_samples(n)`` returns n exact chain samples disjoint from the plan's rows.
        """
        specs = registry.enabled_specs(self)
        needs = {"reference samples": [sp.name for sp in specs if sp.reference and reference_samples is None],
                 "a text decoder for the chain's tokens": [sp.name for sp in specs if sp.reads == "texts" and decoder is None]}
        for what, names in needs.items():
            if names:
                raise ValueError(f"metric(s) {', '.join(names)} need {what}: wire the run with a data module")
        self.plan, self.chain, self.decoder = plan, chain, decoder
        self.reference_samples = reference_samples
        self.run_info = dict(run_info or {})

    # ------------------------------------------------------------------ accumulation
    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.plan is None:
            raise ValueError("the results writer is not wired: call dllm_lit.engine.connect(...) before predict")
        self._specs = registry.enabled_specs(self)
        self._reads_texts = any(spec.reads == "texts" for spec in self._specs)
        self._decoder = self.decoder if (self._reads_texts or self.num_text_examples) else None
        context = registry.MetricContext(
            self.chain, self, device=self.lm_device or str(pl_module.device), intervals=self.bootstrap_resamples > 0,
            data_cache_dir=self.run_info.get("cache_dir"), reference_samples=self.reference_samples, decoder=self.decoder)
        self.metrics = [[SequenceBootstrapper(spec.build(context), self.bootstrap_resamples, self.confidence,
                                              int(self.plan.seed), policy=spec.interval) for spec in self._specs]
                        for _ in self.plan.rows]
        ref = next((i for i, r in enumerate(self.plan.rows) if r.reference), None)
        for s, spec in enumerate(self._specs):  # metrics compared with the reference row's
            if spec.pairs_with_reference:
                for row in self.metrics:
                    row[s].metric.pair_with(None if ref is None else self.metrics[ref][s].metric)
        self._chunks: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.plan.rows]

    def on_predict_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Name the row being sampled in the progress bar, e.g. ``mdlm steps=64``."""
        bar = getattr(trainer.progress_bar_callback, "predict_progress_bar", None)
        if bar is not None and isinstance(batch, dict) and self.plan is not None and int(batch["row"]) >= 0:
            row = self.plan.rows[int(batch["row"])]
            bar.set_description(f"{row.name} " + ("AR" if row.steps is None else f"steps={row.steps}"))

    def on_predict_batch_end(self, trainer, pl_module, outputs: dict[str, Any], batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        row = int(outputs["row"])
        if row < 0:  # an idle process's placeholder item
            return
        x, index = outputs["samples"], outputs["index"]
        texts = self._decoder.decode_batch(x.long()) if self._reads_texts else None
        stats = {**outputs.get("stats", {}), "index": index}
        for spec, metric in zip(self._specs, self.metrics[row]):
            if spec.reads == "stats":
                metric.update(x, stats, index=index)
            else:
                metric.update(x if spec.reads == "ids" else texts, index=index)
        self._chunks[row].append((index, x))

    # ------------------------------------------------------------------ end of predict
    def _gather_samples(self, row: int) -> torch.Tensor:
        chunks = self._chunks[row]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, chunks)
            chunks = [c for part in gathered for c in part]
        chunks = sorted(chunks, key=lambda c: int(c[0][0]))
        return torch.cat([x for _, x in chunks]) if chunks else torch.zeros(0, 0, dtype=torch.uint8)

    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seed = int(self.plan.seed)
        rows, all_samples = [], []
        for i, plan_row in enumerate(self.plan.rows):  # collectives: every process computes every row in order
            row: dict[str, Any] = {"sampler": plan_row.name, "steps": plan_row.steps, "seed": seed}
            for spec, metric in zip(self._specs, self.metrics[i]):
                row.update(spec.values(metric.compute()))
            if self.bootstrap_resamples:
                for spec, metric in zip(self._specs, self.metrics[i]):
                    row.update(spec.intervals(metric.interval()))
            rows.append(row)
            all_samples.append(self._gather_samples(i))
        self.rows = rows
        if trainer.is_global_zero:
            out = Path(self.output_dir or trainer.default_root_dir)
            self.write(rows, out)
            if self.bootstrap_resamples:
                self._write_interval_methods(out)
            self._write_samples(rows, all_samples, out)
            if self.figures:
                from dllm_lit.results.figures import write_figures

                write_figures(rows, out)
            self.log_rows(trainer, rows)

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
        default = ["sampler", "steps", "seed", *registry.METRICS[0].keys]  # header of a run without rows
        w = csv.DictWriter(buf, fieldnames=fields or default, restval="")
        w.writeheader()
        w.writerows(flat_rows)
        atomic_write_text(out / "metrics.csv", buf.getvalue())

    def _write_interval_methods(self, out: Path) -> None:
        """intervals.json: the level, the resamples and the interval method of every column."""
        policies = [m.policy for m in self.metrics[0]] if self.metrics else []
        payload = {"confidence": self.confidence, "resamples": self.bootstrap_resamples, "unit": "sequence",
                   "columns": registry.interval_methods(self._specs, policies)}
        atomic_write_text(out / "intervals.json", json.dumps(payload, indent=2) + "\n")

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
