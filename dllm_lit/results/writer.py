"""The results of a predict run: metrics per row of the plan and the files a run writes.

:class:`ResultsWriter` keeps, for every row of the run's plan, one metric per enabled entry of the
results registry (:data:`dllm_lit.results.registry.METRICS`), each wrapped with its bootstrap
interval (:class:`~dllm_lit.metrics.bootstrap.SequenceBootstrapper`), plus the denoiser
evaluations (NFE) of every sequence.  Files go to ``output_dir`` (default: the trainer's
``default_root_dir``), every one atomically:

- ``metrics.json`` - ``{"meta": {...}, "rows": [...]}`` (format ``dllm_lit.metrics`` version 2;
  :func:`load_metrics` also reads the version-1 bare list).  ``meta`` holds what the run was: N,
  T, seed, the chain (fingerprint, V, source), the metric options, the interval method, the
  package version and commit, whether the run is ``complete``.  A row is
  ``{sampler, label, steps, seed, nfe, nfe_std, settings, <every registered key>, <key>_ci...}``:
  ``label`` is unique and names the options that differ from the sampler's defaults
  (e.g. ``remdm_conf[top_p=1]``), ``settings`` are the sampler's options (denoiser included),
  ``nfe`` / ``nfe_std`` the mean and standard deviation over sequences of the denoiser
  evaluations (null for samplers without a denoiser);
- ``metrics.csv`` - the same rows, intervals as ``<key>_ci_low`` / ``<key>_ci_high`` columns;
- ``samples.pt`` - {"format": "dllm_lit.samples", "version": 1, "rows": [{sampler, label, steps,
  seed, samples: uint8/int16 [N, T]}]};
- ``samples.txt`` - a few decoded samples per row;
- ``figures/<key>_vs_steps.<fmt>`` - the registry's figure keys against steps (and KL against NFE).

**Row by row, resumable.**  In a single-process run a row is committed (samples first, then
``metrics.json``) as soon as its N sequences are done, in plan order.  A rerun into the same
directory keeps every row already on disk whose settings are the same (sampler options, N, T,
seed, chain fingerprint, metric options) and samples only the others (:attr:`RunPlan.done`).
SIGINT and SIGTERM stop the run within a draw or two, never in the middle of a commit, and end
with :class:`RunInterrupted`; every committed row stays on disk.  (A multi-process run commits
its rows at the end.)
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback

from dllm_lit import checks
from dllm_lit.atomic import atomic_torch_save, atomic_write_text
from dllm_lit.engine.plan import jsonable
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.results import registry
from dllm_lit.results.output_folder import lock_output_folder, remove_leftovers, unlock_output_folder

__all__ = ["ResultsWriter", "RunInterrupted", "atomic_write_text", "load_metrics", "SAMPLES_FORMAT",
           "METRICS_FORMAT", "METRICS_VERSION", "FIGURE_FORMATS"]

SAMPLES_FORMAT = "dllm_lit.samples"
METRICS_FORMAT = "dllm_lit.metrics"
METRICS_VERSION = 2
FIGURE_FORMATS = ("png", "pdf", "svg")
#: row fields the writer itself adds around the registry's keys
ROW_HEAD = ("sampler", "label", "steps", "seed", "nfe", "nfe_std", "settings")


class RunInterrupted(Exception):
    """A run stopped by SIGINT / SIGTERM after its finished rows were committed; ``signum`` says which."""

    def __init__(self, signum: int, done: int = 0, total: int = 0, output_dir: str | None = None) -> None:
        self.signum, self.done, self.total, self.output_dir = signum, done, total, output_dir
        name = signal.Signals(signum).name
        where = f" in {output_dir}" if output_dir else ""
        super().__init__(f"interrupted by {name}: {done} of {total} rows are complete{where}; "
                         "rerun the same command to finish the others")


def load_metrics(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(meta, rows)`` of a ``metrics.json`` (a directory or the file); version-1 files (a bare list) give ``meta = {}``."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.json"
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return {}, data
    if not isinstance(data, dict) or "rows" not in data:
        raise ValueError(f"{path} is not a dllm_lit metrics.json (no rows)")
    return dict(data.get("meta") or {}), list(data["rows"])


def _without_code(settings: Any) -> Any:
    """A row's settings without the source hash (to tell a code change from a settings change)."""
    return {k: v for k, v in settings.items() if k != "code"} if isinstance(settings, dict) else settings


def _package_info() -> dict[str, Any]:
    try:
        from importlib.metadata import version

        ver = version("dllm_lit")
    except Exception:
        ver = None
    commit = None
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            commit = out.stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                   capture_output=True, text=True, timeout=5)
            if dirty.returncode == 0 and dirty.stdout.strip():
                commit += "-dirty"
    except Exception:
        pass
    return {"name": "dllm_lit", "version": ver, "commit": commit}


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
        if mauve_num_buckets != "auto":
            checks.integer("mauve_num_buckets", mauve_num_buckets, minimum=2)
        checks.integer("mauve_num_seeds", mauve_num_seeds)
        if mauve_num_reference is not None:
            checks.integer("mauve_num_reference", mauve_num_reference)
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
        self.rows: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {}
        self.plan = None
        self._signal_state: dict[str, Any] | None = None
        self._folder_lock: tuple[Path, Any] | None = None

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

    # ------------------------------------------------------------------ run identity
    def metric_options(self) -> dict[str, Any]:
        """The options that change a row's values: the enabled keys, intervals and the language-model settings."""
        specs = registry.enabled_specs(self)
        out: dict[str, Any] = {"keys": [k for s in specs for k in s.keys],
                               "bootstrap_resamples": self.bootstrap_resamples, "confidence": self.confidence}
        if self.genppl_model:
            out.update(genppl_model=self.genppl_model, genppl_batch_size=self.genppl_batch_size)
        if self.mauve_featurizer:
            out.update(mauve_featurizer=self.mauve_featurizer, mauve_num_reference=self.mauve_num_reference,
                       mauve_num_buckets=self.mauve_num_buckets)
        if self.genppl_model or self.mauve_featurizer:
            out["max_text_length"] = self.max_text_length
        return out

    def run_key(self) -> dict[str, Any]:
        """What every row of the run shares and a kept row must match: N, T, seed, chain, metric options."""
        plan = self.plan
        return {"num_sequences": int(plan.num_sequences), "seq_len": int(plan.seq_len), "seed": int(plan.seed),
                "chain": self.chain.fingerprint if self.chain is not None else None,
                "metric_options": self.metric_options()}

    def build_meta(self, complete: bool = False) -> dict[str, Any]:
        """The ``meta`` block of ``metrics.json``."""
        key = self.run_key()
        chain = {"fingerprint": key["chain"], "vocab_size": getattr(self.chain, "vocab_size", None),
                 "source": jsonable(self.run_info.get("source"))}
        return {"format": METRICS_FORMAT, "version": METRICS_VERSION, "complete": complete,
                "num_sequences": key["num_sequences"], "seq_len": key["seq_len"], "seed": key["seed"],
                "chain": chain, "metric_options": key["metric_options"],
                "intervals": ({"method": "bootstrap over sequences (resample weights drawn from the run's seed)",
                               "resamples": self.bootstrap_resamples, "confidence": self.confidence,
                               "per_key": self._interval_methods()}
                              if self.bootstrap_resamples else None),
                "rows": [{"label": lab, "steps": r.steps, "reference": r.reference} for lab, r in zip(self._labels, self.plan.rows)],
                "package": self._package}

    def _interval_methods(self) -> dict[str, Any]:
        """Each key's interval method ({"method": "centred" | "percentile" | "basic" | null, ...}), once the metrics exist."""
        built = next((row for row in getattr(self, "metrics", None) or [] if row is not None), None)
        if built is None:
            return dict(self._previous_methods)
        return registry.interval_methods(self._specs, [m.policy for m in built])

    # ------------------------------------------------------------------ set-up checks and resume
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Before sampling: check the output folder and the run's settings, load the rows to keep, trap signals."""
        if stage != "predict":
            return
        if self.plan is None:
            raise ValueError("the results writer is not wired: call dllm_lit.engine.connect(...) before predict")
        self.out = self.claim_output(trainer)
        self._check_mauve()
        self._check_limits(trainer)  # every refusal comes before a previous run's files are touched
        self._package = _package_info()
        self._distributed = trainer.world_size > 1
        plan = self.plan
        self._labels = [r.label for r in plan.rows]
        self._previous_methods: dict[str, Any] = {}
        self.metrics = []
        self._settings = [r.settings() for r in plan.rows]
        self._kept: dict[int, tuple[dict[str, Any], torch.Tensor | None]] = self._load_previous() if self.resume else {}
        if not self.resume:
            self._clear_previous("resume is off")
        ref = next((i for i, r in enumerate(plan.rows) if r.reference), None)
        pairs = any(spec.pairs_with_reference for spec in registry.enabled_specs(self))
        if pairs and ref in self._kept and len(self._kept) < len(plan.rows):
            # rows compared with the reference row (kl_excess, ...) need its metric states: draw it again
            # (exact chain samples: cheap, and identical to the kept row)
            del self._kept[ref]
        plan.done = set(self._kept)
        if self._kept:
            from lightning.pytorch.utilities import rank_zero_info

            rank_zero_info(f"{self.out}: {len(self._kept)} of {len(plan.rows)} rows are already complete for these "
                           "settings; sampling the others")
        self.meta = self.build_meta(complete=False)
        for logger in trainer.loggers:
            logger.log_hyperparams({"run": self.meta, "rows": {r.key: s for r, s in zip(plan.rows, self._settings)}})
        if not plan.pending_work():  # every row is on disk: predict will not start its loop
            self._start_rows()
            self._advance(trainer)
            self._finalize(trainer)
            return
        self._install_signal_handlers()

    def claim_output(self, trainer: L.Trainer) -> Path:
        """The output folder, checked writable and locked for this run (one live run per folder, see
        :mod:`dllm_lit.results.output_folder`), with a killed run's temporary files removed.  Called by
        :meth:`setup`, and by the CLI before the trainer starts, so a refused run writes nothing."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_only

        out = Path(self.output_dir or trainer.default_root_dir)
        if self._folder_lock is not None and self._folder_lock[0] == out:
            return out
        self.release_output()
        self._check_writable(out)
        if getattr(rank_zero_only, "rank", 0) == 0:  # the process that writes the files (launcher rank, set from env)
            self._folder_lock = (out, lock_output_folder(out))
            remove_leftovers(out)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_folder_lock"] = None  # an open lock file stays with the process that took it (ddp_spawn pickles us)
        return state

    def release_output(self) -> None:
        """Release the output folder's lock (at the end of the run, or when it fails)."""
        held, self._folder_lock = self._folder_lock, None
        if held is not None:
            unlock_output_folder(held[1])

    @staticmethod
    def _check_writable(out: Path) -> None:
        problem = None
        try:
            out.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".write-check.", dir=out)
            os.close(fd)
            os.unlink(tmp)
        except OSError as exc:
            problem = exc.strerror or str(exc)
        if problem is not None:  # raised outside the handler: the message is the one line the CLI shows
            raise ValueError(f"results.output_dir {str(out)!r} is not writable ({problem})")

    def _check_mauve(self) -> None:
        if not self.mauve_featurizer or self.mauve_num_buckets == "auto":
            return
        n = min(int(self.plan.num_sequences), int(self.mauve_num_reference or self.plan.num_sequences))
        if n < int(self.mauve_num_buckets):
            raise ValueError(f"results.mauve_num_buckets={self.mauve_num_buckets} needs at least that many texts per "
                             f"row, but rows have {n}: raise data.num_sequences (and results.mauve_num_reference) or "
                             "set results.mauve_num_buckets to auto or a smaller number")

    def _check_limits(self, trainer: L.Trainer) -> None:
        """A run must sample every sequence of every row: refuse fast_dev_run / limit_predict_batches (before resume)."""
        pending = len(self.plan.pending_work())
        if getattr(trainer, "fast_dev_run", False):
            raise ValueError("trainer.fast_dev_run samples only the first work item, so rows would be incomplete: "
                             "set it to false and make the run small with data.num_sequences / data.seq_len instead")
        limit = trainer.limit_predict_batches
        if limit is None:
            return
        short = (isinstance(limit, int) and not isinstance(limit, bool) and limit < pending) or (
            isinstance(limit, float) and limit < 1.0)
        if short:
            raise ValueError(f"trainer.limit_predict_batches={limit} would sample only part of the {pending} work "
                             "items, so rows would be incomplete: leave it unset and make the run small with "
                             "data.num_sequences / data.seq_len instead")

    def _row_identity(self, i: int) -> dict[str, Any]:
        return {"label": self._labels[i], "steps": self.plan.rows[i].steps, "settings": self._settings[i]}

    def _load_previous(self) -> dict[int, tuple[dict[str, Any], torch.Tensor | None]]:
        """Rows already complete on disk for the same settings: {plan row index: (row, samples)}."""
        path = self.out / "metrics.json"
        if not path.exists():
            self._clear_previous(None)
            return {}
        try:
            meta, rows = load_metrics(path)
        except (ValueError, json.JSONDecodeError) as exc:
            self._clear_previous(f"its metrics.json could not be read ({exc})")
            return {}
        same_run = meta.get("format") == METRICS_FORMAT and {
            "num_sequences": meta.get("num_sequences"), "seq_len": meta.get("seq_len"), "seed": meta.get("seed"),
            "chain": (meta.get("chain") or {}).get("fingerprint"), "metric_options": meta.get("metric_options")
        } == jsonable(self.run_key())
        self._previous_methods = (meta.get("intervals") or {}).get("per_key") or {} if same_run else {}
        if not same_run:
            self._clear_previous("it holds another run's results (different N, T, seed, chain or metric options)")
            return {}
        samples: dict[tuple[str, Any], torch.Tensor] = {}
        if self.save_samples:
            try:
                saved = torch.load(self.out / "samples.pt", weights_only=True)
                samples = {(r.get("label", r["sampler"]), r["steps"]): r["samples"] for r in saved["rows"]}
            except Exception:
                samples = {}
        by_id = {(r.get("label"), r.get("steps")): r for r in rows}
        kept, recoded = {}, []
        for i in range(len(self.plan.rows)):
            ident = self._row_identity(i)
            row = by_id.get((ident["label"], ident["steps"]))
            if row is not None and _without_code(row.get("settings")) == _without_code(ident["settings"]) \
                    and row["settings"].get("code") != ident["settings"].get("code"):
                recoded.append(self.plan.rows[i].key)
            if row is None or row.get("settings") != ident["settings"]:
                continue
            x = samples.get((ident["label"], ident["steps"]))
            if self.save_samples and (x is None or tuple(x.shape) != (self.plan.num_sequences, self.plan.seq_len)):
                continue
            kept[i] = (row, x)
        if recoded:
            warnings.warn(f"{self.out}: the code of the sampler or denoiser changed since row(s) {', '.join(recoded)} "
                          "were computed (settings[\"code\"]); they are computed again", stacklevel=2)
        stale = len(rows) - len(kept) - len(recoded)
        if stale > 0:
            warnings.warn(f"{self.out}: {stale} row(s) on disk are not part of this run or have other settings; "
                          "they are replaced", stacklevel=2)
        self._remove_figures()
        return kept

    def _clear_previous(self, reason: str | None) -> None:
        """Remove the files a previous run left in the output folder (with a warning naming them)."""
        names = ["metrics.json", "metrics.csv", "samples.pt", "samples.txt"]
        found = [n for n in names if (self.out / n).exists()]
        figs = self._remove_figures()
        for n in found:
            (self.out / n).unlink()
        if (found or figs) and reason is not None:
            warnings.warn(f"{self.out}: {reason}; removed {', '.join(found + [f'{figs} figure(s)'] if figs else found)}",
                          stacklevel=2)

    def _remove_figures(self) -> int:
        folder = self.out / "figures"
        count = 0
        if folder.is_dir():
            for p in folder.iterdir():
                if p.is_file() and p.suffix.lstrip(".") in FIGURE_FORMATS:
                    p.unlink()
                    count += 1
        return count

    # ------------------------------------------------------------------ signals
    def _install_signal_handlers(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        state: dict[str, Any] = {"critical": False, "pending": None, "previous": {}}

        def handler(signum, frame):
            if self._signal_state is not state:  # left installed after the run (restored by someone else)
                prev = state["previous"].get(signum)
                if callable(prev):
                    return prev(signum, frame)
                raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)
            if state["critical"]:
                state["pending"] = signum
                return
            raise self._interrupted(signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            state["previous"][sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
        self._signal_state = state

    def _interrupted(self, signum: int) -> RunInterrupted:
        done = len(self.rows) if not self._distributed else 0
        return RunInterrupted(signum, done, len(self.plan.rows), str(self.out))

    def _restore_signal_handlers(self) -> None:
        state, self._signal_state = self._signal_state, None
        if state is not None:
            for sig, prev in state["previous"].items():
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "predict":
            self._restore_signal_handlers()
            self.release_output()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_signal_handlers()  # Lightning calls no teardown hook after an exception
        self.release_output()

    # ------------------------------------------------------------------ accumulation
    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._specs = registry.enabled_specs(self)
        self._reads_texts = any(spec.reads == "texts" for spec in self._specs)
        self._decoder = self.decoder if (self._reads_texts or self.num_text_examples) else None
        context = registry.MetricContext(
            self.chain, self, device=self.lm_device or str(pl_module.device), intervals=self.bootstrap_resamples > 0,
            data_cache_dir=self.run_info.get("cache_dir"), reference_samples=self.reference_samples, decoder=self.decoder)
        self.metrics = [None if i in self.plan.done else
                        [SequenceBootstrapper(spec.build(context), self.bootstrap_resamples, self.confidence,
                                              int(self.plan.seed), policy=spec.interval) for spec in self._specs]
                        for i in range(len(self.plan.rows))]
        ref = next((i for i, r in enumerate(self.plan.rows) if r.reference), None)
        for s, spec in enumerate(self._specs):  # metrics compared with the reference row's
            if spec.pairs_with_reference:
                for row in self.metrics:
                    if row is not None:
                        row[s].metric.pair_with(None if ref is None or self.metrics[ref] is None
                                                else self.metrics[ref][s].metric)
        self._start_rows()
        self._advance(trainer)  # rows kept from disk at the head of the plan

    def _start_rows(self) -> None:
        self._chunks: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.plan.rows]
        self._nfe: list[list[torch.Tensor]] = [[] for _ in self.plan.rows]
        self._count = [0] * len(self.plan.rows)
        self._finished: dict[int, tuple[dict[str, Any], torch.Tensor | None]] = {}
        self._committed: list[tuple[dict[str, Any], torch.Tensor | None]] = []
        self.rows = []

    def on_predict_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Name the row being sampled in the progress bar (TQDM or Rich), e.g. ``row 2/9 mdlm steps=64``."""
        if not isinstance(batch, dict) or self.plan is None:
            return
        i = int(batch["row"])
        if i < 0:  # an idle process's placeholder item
            return
        row = self.plan.rows[i]
        text = f"row {i + 1}/{len(self.plan.rows)} {self._labels[i]} " + ("AR" if row.steps is None else f"steps={row.steps}")
        callback = trainer.progress_bar_callback
        bar = getattr(callback, "predict_progress_bar", None)
        if hasattr(bar, "set_description"):  # TQDMProgressBar
            bar.set_description(text)
        task = getattr(callback, "predict_progress_bar_id", None)
        progress = getattr(callback, "progress", None)
        if task is not None and progress is not None:  # RichProgressBar
            progress.update(task, description=text)

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
        nfe = outputs.get("nfe")
        self._nfe[row].append((index, torch.full((len(index),), float("nan"), dtype=torch.float64)
                               if nfe is None else nfe.to(torch.float64).reshape(-1)))
        self._count[row] += len(index)
        if not self._distributed and self._count[row] >= self.plan.num_sequences:
            self._finished[row] = self._finish_row(row)
            self._advance(trainer)

    # ------------------------------------------------------------------ rows
    def _gather(self, chunks: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor | None:
        if self._distributed and dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, chunks)
            chunks = [c for part in gathered for c in part]
        chunks = sorted(chunks, key=lambda c: int(c[0][0]))
        return torch.cat([x for _, x in chunks]) if chunks else None

    def _finish_row(self, i: int) -> tuple[dict[str, Any], torch.Tensor | None]:
        """Compute row ``i``'s values (collective in a multi-process run) and gather its samples."""
        plan_row = self.plan.rows[i]
        nfe = self._gather(self._nfe[i])
        finite = nfe[~torch.isnan(nfe)] if nfe is not None else torch.zeros(0)
        row: dict[str, Any] = {"sampler": plan_row.name, "label": self._labels[i], "steps": plan_row.steps,
                               "seed": int(self.plan.seed),
                               "nfe": float(finite.mean()) if finite.numel() else None,
                               "nfe_std": float(finite.std(unbiased=False)) if finite.numel() else None,
                               "settings": self._settings[i]}
        for spec, metric in zip(self._specs, self.metrics[i]):
            row.update(spec.values(metric.compute()))
        if self.bootstrap_resamples:
            for spec, metric in zip(self._specs, self.metrics[i]):
                row.update(spec.intervals(metric.interval()))
        samples = self._gather(self._chunks[i])
        self._chunks[i], self._nfe[i] = [], []
        return row, samples

    def _advance(self, trainer: L.Trainer) -> None:
        """Commit, in plan order, every row that is finished (or kept from disk) and follows the committed ones."""
        before = n = len(self._committed)
        while n < len(self.plan.rows) and (n in self._finished or n in self._kept):
            row, x = self._finished.pop(n) if n in self._finished else self._kept[n]
            self._committed.append((row, x))
            self.rows.append(row)
            if trainer.is_global_zero:
                self._log_row(trainer, n, row)
            n += 1
        if n > before and trainer.is_global_zero:
            self._commit(complete=n == len(self.plan.rows))

    def _commit(self, complete: bool) -> None:
        """Write samples first, then metrics (the commit record); signals wait until both are on disk."""
        state = self._signal_state
        if state is not None:
            state["critical"] = True
        try:
            rows = [r for r, _ in self._committed]
            samples = [x for _, x in self._committed]
            self._write_samples(rows, samples, self.out)
            self.meta = self.build_meta(complete=complete)
            self.write(rows, self.out, meta=self.meta)

        finally:
            if state is not None:
                state["critical"] = False
                if state["pending"] is not None:
                    signum, state["pending"] = state["pending"], None
                    raise self._interrupted(signum)

    # ------------------------------------------------------------------ end of predict
    def on_predict_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._distributed:  # collectives: every process computes every pending row in order
            for i in range(len(self.plan.rows)):
                if i not in self.plan.done:
                    self._finished[i] = self._finish_row(i)
            self._advance(trainer)
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
        self.log_rows(trainer, self.rows, figures=paths, files=[self.out / n for n in ("metrics.json", "samples.txt",
                                                                                        "samples.pt")])
        for logger in trainer.loggers:  # the run config logged at set-up said complete: false
            logger.log_hyperparams({"run": {**self.meta, "complete": True}})

    def _dependence_figure(self) -> list[Path]:
        """In an HMM world: ``figures/dependence_profile`` from the saved samples (exact curve vs every row's)."""
        from dllm_lit.results.registry import hmm_world

        if hmm_world(self.chain) is None or not self.save_samples or not (self.out / "samples.pt").is_file():
            return []
        from dllm_lit.results.dependence_figure import plot_dependence_profile
        from dllm_lit.results.figures import run_caption

        saved = torch.load(self.out / "samples.pt", weights_only=True)["rows"]
        labels = [f"{r['label']} " + ("(exact samples)" if r["steps"] is None else f"steps={r['steps']}") for r in saved]
        return plot_dependence_profile(self.chain, labels, [r["samples"] for r in saved],
                                       self.out / "figures" / "dependence_profile", formats=self.figure_formats,
                                       caption=run_caption(self.meta))

    # ------------------------------------------------------------------ files
    @staticmethod
    def write(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any] | None = None) -> None:
        """metrics.json ({"meta", "rows"}) and metrics.csv (intervals split into two columns, settings as JSON)."""
        atomic_write_text(out / "metrics.json", json.dumps({"meta": meta or {}, "rows": rows}, indent=2) + "\n")
        flat_rows = []
        for r in rows:
            flat: dict[str, Any] = {}
            for k, v in r.items():
                if k.endswith("_ci"):
                    flat[f"{k}_low"], flat[f"{k}_high"] = (v if v is not None else ("", ""))
                elif isinstance(v, (dict, list)):
                    flat[k] = json.dumps(v, sort_keys=True)
                else:
                    flat[k] = "" if v is None else v
            flat_rows.append(flat)
        fields: list[str] = []
        for fr in flat_rows:
            fields += [k for k in fr if k not in fields]
        buf = io.StringIO()
        default = [*ROW_HEAD, *registry.METRICS[0].keys]  # header of a run without rows
        w = csv.DictWriter(buf, fieldnames=fields or default, restval="")
        w.writeheader()
        w.writerows(flat_rows)
        atomic_write_text(out / "metrics.csv", buf.getvalue())

    def _write_samples(self, rows: list[dict[str, Any]], samples: list[torch.Tensor | None], out: Path) -> None:
        if self.save_samples:
            # the row fields pass through JSON, as rows kept by a resume do: the pickle then shares no object a
            # fresh row would (a label that is the sampler's name), so the bytes are the same after a resume
            heads = json.loads(json.dumps([{k: r[k] for k in ("sampler", "label", "steps", "seed")} for r in rows]))
            payload = {"format": SAMPLES_FORMAT, "version": 1,
                       "rows": [{**head, "samples": x} for head, x in zip(heads, samples)]}
            atomic_torch_save(payload, out / "samples.pt")
        decoder = self.decoder if self.num_text_examples else None
        if decoder is not None:
            parts = []
            for r, x in zip(rows, samples):
                label = f"{r['label']} " + ("AR (exact chain samples)" if r["steps"] is None else f"steps={r['steps']}")
                if x is None:
                    parts.append(f"=== {label} === (samples not kept)")
                    continue
                texts = decoder.decode_batch(x[: self.num_text_examples].long())
                parts.append(f"=== {label} ===\n" + "\n".join(f"[{i}] {t}" for i, t in enumerate(texts)))
            atomic_write_text(out / "samples.txt", "\n\n".join(parts) + "\n")

    # ------------------------------------------------------------------ loggers
    @staticmethod
    def _numeric(row: dict[str, Any]) -> dict[str, float]:
        return {k: float(v) for k, v in row.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("seed",)
                and not (isinstance(v, float) and math.isnan(v))}

    def _log_row(self, trainer: L.Trainer, index: int, row: dict[str, Any]) -> None:
        """One row as metrics ``<label>/<key>`` (W&B step = the row's index in the plan, so steps stay monotone)."""
        values = {f"{row['label']}/{k}": v for k, v in self._numeric(row).items()}
        if row["steps"] is not None:
            values[f"{row['label']}/steps"] = float(row["steps"])
        for logger in trainer.loggers:
            logger.log_metrics(values, step=index)

    @classmethod
    def log_rows(cls, trainer: L.Trainer, rows: list[dict[str, Any]], figures: list[Path] = (),
                 files: list[Path] = ()) -> None:
        """The results table, the sweep metric, the figures and the result files, to every logger.

        The sweep metric: the unprefixed keys (``kl``, ``nll``, ...) of the run's last non-reference row,
        so a W&B sweep can optimise ``kl`` over points that each run one (sampler, steps).
        """
        if not rows:
            return
        main = next((r for r in reversed(rows) if r["steps"] is not None or r["label"] != "ar"), rows[-1])
        cols = []
        for c in rows[0].keys():  # intervals as <key>_low / <key>_high columns, as in metrics.csv
            cols += [f"{c[:-3]}_low", f"{c[:-3]}_high"] if c.endswith("_ci") else [c]

        def cell(r: dict[str, Any], c: str) -> Any:
            for end, i in (("_low", 0), ("_high", 1)):
                if c.endswith(end) and f"{c[:-len(end)]}_ci" in r:
                    ci = r[f"{c[:-len(end)]}_ci"]
                    return ci[i] if isinstance(ci, (list, tuple)) else None
            v = r.get(c)
            return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v

        data = [[cell(r, c) for c in cols] for r in rows]
        for logger in trainer.loggers:
            logger.log_metrics(cls._numeric(main), step=len(rows))
            if hasattr(logger, "log_table"):
                logger.log_table(key="results", columns=cols, data=data)
            if figures and hasattr(logger, "log_image"):
                pngs = [p for p in figures if Path(p).suffix == ".png"]
                for p in pngs:
                    logger.log_image(key=f"figures/{Path(p).stem}", images=[str(p)])
            experiment = getattr(logger, "experiment", None)
            if type(logger).__name__ == "WandbLogger" and hasattr(experiment, "save"):
                for p in [*files, *figures]:
                    if Path(p).exists():
                        experiment.save(str(p), base_path=str(Path(p).parent if Path(p).parent.name != "figures"
                                                               else Path(p).parent.parent), policy="now")
