"""The results of a predict run: the Lightning callback that ties the results pieces together.

:class:`ResultsWriter` keeps, for every row of the run's plan, one metric per enabled entry of the
results registry (:data:`dllm_lit.results.registry.METRICS`) and commits each row as it finishes.  Each
job is its own module; the writer only orders them along Lightning's hooks:

- :mod:`~dllm_lit.results.accumulator` - the metrics of every row, their intervals, samples and NFE;
- :mod:`~dllm_lit.results.run_store` - the output folder: run identity, resume, atomic commits;
- :mod:`~dllm_lit.results.signal_guard` - SIGINT / SIGTERM stop the run between commits;
- :mod:`~dllm_lit.results.setup_checks` - settings refused before anything is sampled or removed;
- :mod:`~dllm_lit.results.files` and :mod:`~dllm_lit.results.loggers` - the exporters (file formats;
  Lightning loggers and W&B); figures: :mod:`~dllm_lit.results.figures`.

Files go to ``output_dir`` (default: the trainer's ``default_root_dir``): ``metrics.json`` (``{"meta",
"rows"}``: what the run was - N, T, seed, the chain, the metric options, the interval method, the package
version and commit, whether it is ``complete``), ``metrics.csv``, ``samples.pt``, ``samples.txt`` and
``figures/<key>_vs_steps.<fmt>``.  A row is ``{sampler, label, steps, seed, nfe, nfe_std, settings,
<every registered key>, <key>_ci...}``: ``label`` is unique and names the options that differ from the
sampler's defaults (e.g. ``remdm_conf[top_p=1]``), ``settings`` are the sampler's options (denoiser
included), ``nfe`` / ``nfe_std`` the mean and standard deviation of the denoiser evaluations.

**Row by row, resumable.**  A row is committed (samples first, then
``metrics.json``) as soon as its N sequences are done, in plan order.  A rerun into the same
directory keeps every row already on disk whose settings are the same (sampler options, N, T,
seed, chain fingerprint, metric options) and samples only the others (:attr:`RunPlan.done`).
SIGINT and SIGTERM stop the run within a draw or two, never in the middle of a commit, and end
with :class:`RunInterrupted`; every committed row stays on disk.  A multi-process run commits the same
way from rank 0: each process finishes a row (collectively) as soon as it has run its own items of it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from dllm_lit import checks
from dllm_lit.util.atomic import atomic_write_text
from dllm_lit.results import loggers as logger_export
from dllm_lit.results import registry
from dllm_lit.results.accumulator import MetricAccumulator
from dllm_lit.results.files import FIGURE_FORMATS, METRICS_FORMAT, METRICS_VERSION, ROW_HEAD, SAMPLES_FORMAT, load_metrics
from dllm_lit.results.setup_checks import check_complete_rows, check_metric_options, check_metrics_fit_run
from dllm_lit.results.run_store import RunStore, package_info, run_key, run_meta
from dllm_lit.results.signal_guard import RunInterrupted, SignalGuard

__all__ = ["ResultsWriter", "RunInterrupted", "atomic_write_text", "load_metrics", "SAMPLES_FORMAT",
           "METRICS_FORMAT", "METRICS_VERSION", "FIGURE_FORMATS", "ROW_HEAD"]

#: the constructor options that are options of registered metrics (their ``MetricSpec.options`` fields)
LEGACY_METRIC_OPTIONS = ("genppl_model", "genppl_batch_size", "mauve_featurizer", "mauve_num_reference",
                         "mauve_num_buckets", "mauve_num_seeds", "max_text_length", "cache_dir", "forward_kl")


class ResultsWriter(Callback):
    """Accumulate metrics per row during predict and commit each row's results as it finishes.

    Args:
        output_dir: where files go (default ``trainer.default_root_dir``).
        bootstrap_resamples: resamples for the confidence intervals (0 disables them).
        confidence: interval level.
        num_text_examples: decoded samples per row in ``samples.txt``.
        save_samples: write ``samples.pt``.
        figures: write the figures.
        figure_formats: file formats of the figures: any of png, pdf, svg.
        resume: keep the rows already in ``output_dir`` whose settings match, and sample only the rest.
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
        forward_kl: add the forward sequence KL ``seq_kl_fwd`` (exact samples scored under each random-order
            sampler's per-order law: a second decoding pass) with its exact prediction and bounds (docs/theory.md).
        metric_options: options of other registered metrics, ``{name: value}`` (the fields of their
            ``MetricSpec.options`` dataclasses, :mod:`dllm_lit.results.metric_options`).

    The GenPPL and MAUVE options above are the fields of those metrics' options dataclasses
    (:class:`~dllm_lit.results.metric_options.GenPPLOptions`, :class:`~dllm_lit.results.metric_options.MauveOptions`);
    which metrics a row holds is data: the enabled entries of :data:`dllm_lit.results.registry.METRICS`.
    """

    def __init__(
        self,
        output_dir: str | None = None,
        bootstrap_resamples: int = 200,
        confidence: float = 0.95,
        num_text_examples: int = 5,
        save_samples: bool = True,
        figures: bool = True,
        figure_formats: list[str] | str = "png",
        resume: bool = True,
        genppl_model: str | None = None,
        genppl_batch_size: int = 8,
        mauve_featurizer: str | None = None,
        mauve_num_reference: int | None = None,
        mauve_num_buckets: int | str = 25,
        mauve_num_seeds: int = 3,
        max_text_length: int = 1024,
        lm_device: str | None = None,
        cache_dir: str | None = None,
        forward_kl: bool = False,
        metric_options: dict[str, Any] | None = None,
    ) -> None:
        if checks.integer("bootstrap_resamples", bootstrap_resamples, minimum=0) == 1:
            raise ValueError(f"bootstrap_resamples must be 0 (off) or >= 2, got {bootstrap_resamples}")
        checks.real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
        checks.integer("num_text_examples", num_text_examples, minimum=0)
        formats = [figure_formats] if isinstance(figure_formats, str) else list(figure_formats)
        if not formats:
            raise ValueError(f"figure_formats must name at least one of {', '.join(FIGURE_FORMATS)}")
        for fmt in formats:
            checks.choice("figure_formats", fmt, FIGURE_FORMATS)
        self.output_dir = output_dir
        self.bootstrap_resamples = bootstrap_resamples
        self.confidence = confidence
        self.num_text_examples = num_text_examples
        self.save_samples = save_samples
        self.figures = figures
        self.figure_formats = tuple(dict.fromkeys(formats))
        self.resume = resume
        self.genppl_model = genppl_model
        self.genppl_batch_size = genppl_batch_size
        self.mauve_featurizer = mauve_featurizer
        self.mauve_num_reference = mauve_num_reference
        self.mauve_num_buckets = mauve_num_buckets
        self.mauve_num_seeds = mauve_num_seeds
        self.max_text_length = max_text_length
        self.lm_device = lm_device
        self.cache_dir = cache_dir
        self.forward_kl = bool(forward_kl)
        self.extra_metric_options = dict(metric_options or {})
        check_metric_options(self.extra_metric_options, self.metric_settings(), LEGACY_METRIC_OPTIONS)
        self.rows: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}
        self.plan = None
        self.chain = None
        self._store: RunStore | None = None
        self._guard = SignalGuard(self._interrupted)
        self._accumulator: MetricAccumulator | None = None

    # ------------------------------------------------------------------ metric options
    def metric_settings(self) -> dict[str, Any]:
        """Every metric option, ``{name: value}`` (the constructor's and ``metric_options``)."""
        return {**{k: getattr(self, k) for k in LEGACY_METRIC_OPTIONS}, **self.extra_metric_options}

    def _contexts(self, specs: list[registry.MetricSpec], device: str | None) -> list[registry.MetricContext]:
        """What each spec's ``build`` reads: the run's context with the spec's own options instance."""
        base = registry.MetricContext(self.chain, self, device=device, intervals=self.bootstrap_resamples > 0,
                                      data_cache_dir=self.run_info.get("cache_dir"),
                                      reference_samples=self.reference_samples, decoder=self.decoder)
        return [base if spec.options is None else dataclasses.replace(base, options=registry.spec_options(spec, self))
                for spec in specs]

    # ------------------------------------------------------------------ wiring and run identity
    def connect(self, plan, chain, decoder=None, reference_samples=None, run_info: dict[str, Any] | None = None) -> None:
        """Wire the run: its plan (rows, N, T, seed), the chain, the text decoder and the MAUVE references.

        ``reference_samples(n)`` returns n exact chain samples disjoint from the plan's rows.
        """
        # metrics registered after construction
        check_metric_options(self.extra_metric_options, self.metric_settings(), LEGACY_METRIC_OPTIONS)
        self.chain = chain
        specs = registry.enabled_specs(self)
        needs = {"reference samples": [sp.name for sp in specs if sp.reference and reference_samples is None],
                 "a text decoder for the chain's tokens": [sp.name for sp in specs if sp.reads == "texts" and decoder is None]}
        for what, names in needs.items():
            if names:
                raise ValueError(f"metric(s) {', '.join(names)} need {what}: wire the run with a data module")
        self.plan, self.decoder = plan, decoder
        self.reference_samples = reference_samples
        self.run_info = dict(run_info or {})

    def metric_identity(self) -> dict[str, Any]:
        """The options that change a row's values: the enabled keys, the intervals and every enabled metric's
        options (its options dataclass: :func:`dllm_lit.results.registry.metric_identity`)."""
        specs = registry.enabled_specs(self)
        return {"keys": [k for s in specs for k in s.keys], "bootstrap_resamples": self.bootstrap_resamples,
                "confidence": self.confidence, **registry.metric_identity(specs, self)}

    def run_key(self) -> dict[str, Any]:
        """What every row of the run shares and a kept row must match: N, T, seed, chain, metric options."""
        return run_key(self.plan, self.chain, self.metric_identity())

    def build_meta(self, complete: bool = False) -> dict[str, Any]:
        """The ``meta`` block of ``metrics.json``."""
        intervals = ({"method": "bootstrap over sequences (resample weights drawn from the run's seed)",
                      "resamples": self.bootstrap_resamples, "confidence": self.confidence,
                      "per_key": self._interval_methods()} if self.bootstrap_resamples else None)
        return run_meta(self.run_key(), self.chain, self.plan, self._labels, intervals, self.run_info.get("source"),
                        self._package, complete)

    def _interval_methods(self) -> dict[str, Any]:
        """Each key's interval method ({"method": "centred" | "percentile" | "basic" | null, ...}), once the metrics exist."""
        policies = self._accumulator.policies() if self._accumulator is not None else None
        if policies is None:
            return dict(self._previous_methods)
        return registry.interval_methods(self._accumulator.specs, policies)

    @property
    def metrics(self) -> list[Any]:
        """Per plan row, its metrics (each wrapped with its interval), or None for a row kept from disk."""
        return self._accumulator.metrics if self._accumulator is not None else []

    # ------------------------------------------------------------------ set-up checks and resume
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Before sampling: check the output folder and the run's settings, load the rows to keep, trap signals."""
        if stage != "predict":
            return
        if self.plan is None:
            raise ValueError("the results writer is not wired: call dllm_lit.engine.connect(...) before predict")
        self.out = self.claim_output(trainer)
        check_metrics_fit_run(self, self.plan.num_sequences)
        check_complete_rows(trainer, len(self.plan.pending_work()))  # every refusal comes before a previous run's files are touched
        self._package = package_info()
        self._distributed = trainer.world_size > 1
        plan = self.plan
        self._labels = [r.label for r in plan.rows]
        self._previous_methods: dict[str, Any] = {}
        self._accumulator = None
        self._settings = [r.settings() for r in plan.rows]
        self._kept: dict[int, tuple[dict[str, Any], torch.Tensor | None]] = {}
        if self.resume:
            self._kept, self._previous_methods = self._store.load_previous(plan, self._labels, self._settings,
                                                                           self.run_key(), self.save_samples)
        else:
            self._store.clear("resume is off")
        ref = next((i for i, r in enumerate(plan.rows) if r.reference), None)
        pairs = any(spec.pairs_with_reference for spec in registry.enabled_specs(self))
        if pairs and ref in self._kept and len(self._kept) < len(plan.rows):
            # rows compared with the reference row (kl_excess, ...) need its metric states: draw it again
            # (exact chain samples: cheap, and identical to the kept row)
            del self._kept[ref]
        plan.done = set(self._kept)
        if self._kept:
            from lightning.pytorch.utilities import rank_zero_only

            from dllm_lit.util.console import log

            kept = ", ".join(plan.rows[i].key for i in sorted(self._kept))
            left = len(plan.rows) - len(self._kept)
            rank_zero_only(log.info)(f"resume: kept {len(self._kept)} of {len(plan.rows)} rows of {self.out} with these "
                                     f"settings ({kept}); sampling {left or 'none'}"
                                     + ("" if left else " (--results.resume false starts afresh)"))
        self.meta = self.build_meta(complete=False)
        logger_export.log_run_config(trainer.loggers, self.meta, {r.key: s for r, s in zip(plan.rows, self._settings)})
        if not plan.pending_work():  # every row is on disk: predict will not start its loop
            self._start_commits()
            self._advance(trainer)
            self._finalize(trainer)
            return
        self._guard.install()

    def claim_output(self, trainer: L.Trainer) -> Path:
        """The output folder, checked writable and locked for this run (one live run per folder, see
        :mod:`dllm_lit.results.output_folder`), with a killed run's temporary files removed.  Called by
        :meth:`setup`, and by the CLI before the trainer starts, so a refused run writes nothing."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        out = Path(self.output_dir or trainer.default_root_dir)
        if self._store is not None and self._store.out == out:
            return out
        self.release_output()
        # the process that writes the files (launcher rank, set from env) locks the folder
        self._store = RunStore.claim(out, writes=getattr(rank_zero_only, "rank", 0) == 0,
                                     field="results.output_dir" if self.output_dir else "trainer.default_root_dir")
        return out

    def release_output(self) -> None:
        """Release the output folder's lock (at the end of the run, or when it fails)."""
        store, self._store = self._store, None
        if store is not None:
            store.release()

    # ------------------------------------------------------------------ signals and teardown
    def _interrupted(self, signum: int) -> RunInterrupted:
        done = len(self.rows)  # rank 0 commits each row as it is finished, in a multi-process run too
        return RunInterrupted(signum, done, len(self.plan.rows), str(self.out))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "predict":
            self._guard.restore()
            self.release_output()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._guard.restore()  # Lightning calls no teardown hook after an exception
        self.release_output()

    # ------------------------------------------------------------------ accumulation
    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        specs = registry.enabled_specs(self)
        reads_texts = any(spec.reads == "texts" for spec in specs)
        self._accumulator = MetricAccumulator(
            self.plan, specs, self._contexts(specs, self.lm_device or str(pl_module.device)), self.bootstrap_resamples,
            self.confidence, decoder=self.decoder if reads_texts else None, distributed=self._distributed)
        self._start_commits()
        self._advance(trainer)  # rows kept from disk at the head of the plan

    def on_predict_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Name the row being sampled in the progress bar (TQDM or Rich), e.g. ``row 2/9 mdlm steps=64``."""
        if not isinstance(batch, dict) or self.plan is None:
            return
        i = int(batch["row"])
        if i < 0:  # an idle process's placeholder item
            return
        row = self.plan.rows[i]
        text = f"row {i + 1}/{len(self.plan.rows)} {self._labels[i]} " + ("AR" if row.steps is None else f"steps={row.steps}")
        logger_export.describe_progress(trainer.progress_bar_callback, text)

    def on_predict_batch_end(self, trainer, pl_module, outputs: dict[str, Any], batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        row = int(outputs["row"])
        if row < 0:  # an idle process's placeholder item
            return
        if self._accumulator.update(row, outputs):
            self._finished[row] = self._accumulator.finish(row, self._labels[row], self._settings[row])
            self._advance(trainer)
        elif self._distributed:  # every process finishes (collectively) the rows it has run past; rank 0 commits
            start = int(outputs["index"][0]) if len(outputs["index"]) else 0
            self._finish_rows(trainer, self._accumulator.finished_here(row, start, trainer.world_size))

    def _finish_rows(self, trainer: L.Trainer, rows: list[int]) -> None:
        """Finish each of ``rows`` not finished yet, in plan order, and commit what follows the committed rows."""
        todo = [i for i in rows if i not in self._closed]
        for i in todo:
            self._finished[i] = self._accumulator.finish(i, self._labels[i], self._settings[i])
            self._closed.add(i)
        if todo:
            self._advance(trainer)

    # ------------------------------------------------------------------ commit order
    def _start_commits(self) -> None:
        self._finished: dict[int, tuple[dict[str, Any], torch.Tensor | None]] = {}
        self._closed: set[int] = set()  # rows finished (a multi-process run finishes each one once)
        self._committed: list[tuple[dict[str, Any], torch.Tensor | None]] = []
        self.rows = []

    def _advance(self, trainer: L.Trainer) -> None:
        """Commit, in plan order, every row that is finished (or kept from disk) and follows the committed ones."""
        before = n = len(self._committed)
        while n < len(self.plan.rows) and (n in self._finished or n in self._kept):
            row, x = self._finished.pop(n) if n in self._finished else self._kept[n]
            self._committed.append((row, x))
            self.rows.append(row)
            if trainer.is_global_zero:
                logger_export.log_row(trainer.loggers, n, row)
            n += 1
        if n > before and trainer.is_global_zero:
            self._commit(complete=n == len(self.plan.rows))

    def _commit(self, complete: bool) -> None:
        """Write samples first, then metrics (the commit record); signals wait until both are on disk."""
        with self._guard.critical():
            self.meta = self.build_meta(complete=complete)
            self._store.commit([r for r, _ in self._committed], [x for _, x in self._committed], self.meta,
                               self.save_samples, decoder=self.decoder if self.num_text_examples else None,
                               num_text_examples=self.num_text_examples, default_keys=registry.METRICS[0].keys)

    # ------------------------------------------------------------------ end of predict
    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._distributed:  # the rows this process had no item of after its last one (collectives, in order)
            self._finish_rows(trainer, [i for i in range(len(self.plan.rows)) if i not in self.plan.done])
        missing = [self._labels[i] for i in range(len(self.plan.rows)) if i not in self.plan.done and
                   i >= len(self._committed)]
        if missing:
            raise RuntimeError(f"predict ended before rows {missing} were complete")
        self._finalize(trainer)

    def _finalize(self, trainer: L.Trainer) -> None:
        """Figures and the loggers' table, figures and samples file, once every row is on disk."""
        if not trainer.is_global_zero:
            return
        paths = []
        if self.figures:
            from dllm_lit.results.figures import write_figures

            paths = write_figures(self.rows, self.out, formats=self.figure_formats, meta=self.meta)
            paths += self._dependence_figure()
        logger_export.log_rows(trainer.loggers, self.rows, figures=paths,
                               files=[self.out / n for n in ("metrics.json", "samples.txt", "samples.pt")])
        logger_export.log_complete(trainer.loggers, self.meta)

    def _dependence_figure(self) -> list[Path]:
        """In an HMM world: ``figures/dependence_profile`` from the saved samples (exact curve vs every row's)."""
        if registry.hmm_world(self.chain) is None or not self.save_samples or not (self.out / "samples.pt").is_file():
            return []
        from dllm_lit.results.dependence_figure import plot_dependence_profile
        from dllm_lit.results.figures import run_caption

        saved = torch.load(self.out / "samples.pt", weights_only=True)["rows"]
        labels = [f"{r['label']} " + ("(exact samples)" if r["steps"] is None else f"steps={r['steps']}") for r in saved]
        return plot_dependence_profile(self.chain, labels, [r["samples"] for r in saved],
                                       self.out / "figures" / "dependence_profile", formats=self.figure_formats,
                                       caption=run_caption(self.meta))
