"""One explicit wiring step for a run, shared by the CLI, the benchmarks and Python use.

:func:`connect` builds the chain from the data module, hands it to the sampler (which builds the
exact oracle when it has no denoiser and checks its options), builds the
:class:`~dllm_lit.engine.plan.RunPlan`, and hands the plan to the data module, the sampler and the
results writer (with the chain and the text decoder).  After it, every Lightning hook reads only
its own component's attributes - nothing reaches through the Trainer.

:func:`predict` wires and runs a whole run with a Trainer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dllm_lit.engine.budget import check_run_fits
from dllm_lit.engine.plan import RunPlan
from dllm_lit.engine.threads import sampling_thread_count
from dllm_lit.samplers.ar import AR

if TYPE_CHECKING:
    import lightning as L

    from dllm_lit.data.datamodule import MarkovDataModule
    from dllm_lit.results.writer import ResultsWriter
    from dllm_lit.samplers.base import Sampler

__all__ = ["connect", "connect_training", "predict"]


def connect(sampler: "Sampler", datamodule: "MarkovDataModule", writer: "ResultsWriter | None" = None,
            reference: bool = True) -> RunPlan:
    """Wire one run; returns its plan.  ``reference`` adds the exact-chain-samples row (AR baseline): the
    plan's reference sampler is supplied here, an exact :class:`~dllm_lit.samplers.AR` on the run's chain.

    A run whose memory estimate exceeds the machine's is refused first (:mod:`dllm_lit.engine.budget`).
    """
    own = sampler.rows()
    rows = len(own) + (1 if reference and not any(r.reference for r in own) else 0)
    sizes = (datamodule.num_sequences, datamodule.seq_len)
    check_run_fits(*sizes, 1, rows, datamodule.chunk_size, posterior_rows=False)  # before the chain is built
    chain = datamodule.build_chain()
    if hasattr(chain, "check_length"):  # a finite-horizon world (a task) fixes the length
        chain.check_length(datamodule.seq_len)
    check_run_fits(*sizes, chain.vocab_size, rows, datamodule.chunk_size, posterior_rows=sampler.requires_denoiser)
    sampler.connect(chain, cache_dir=datamodule.cache_dir)
    plan = RunPlan.build(sampler, datamodule.num_sequences, datamodule.seq_len, datamodule.seed,
                         datamodule.chunk_size, reference=AR() if reference else None)
    for row in plan.rows:
        if row.sampler is not sampler:
            row.sampler.connect(chain, cache_dir=datamodule.cache_dir)
    sampler.use_plan(plan)
    settings = writer.metric_settings() if callable(getattr(writer, "metric_settings", None)) else {}
    for row in plan.rows:  # the forward-KL and sandwich scoring passes run only when the results ask for them
        row.sampler.score_reference = bool(getattr(writer, "forward_kl", False))
        row.sampler.sandwich_paths = int(settings.get("sandwich_paths", 0))
        row.sampler.sandwich_method = str(settings.get("sandwich_method", "orders"))
        if row.sampler.sandwich_refusal() is not None:
            raise ValueError(row.sampler.sandwich_refusal())
    datamodule.use_plan(plan)
    if writer is not None:
        writer.connect(plan, chain, decoder=datamodule.decoder(), reference_samples=datamodule.reference_samples,
                       run_info={"source": datamodule.source.describe(), "cache_dir": str(datamodule.cache_dir)})
    return plan


def connect_training(module, datamodule: "MarkovDataModule"):
    """Wire a denoiser training run: the data module's chain, length and seed build the module's model."""
    chain = datamodule.build_chain()
    return module.connect(chain, datamodule.seq_len, datamodule.seed)


def predict(sampler: "Sampler", datamodule: "MarkovDataModule", writer: "ResultsWriter | None" = None,
            trainer: "L.Trainer | None" = None, reference: bool = True, **trainer_kwargs: Any) -> RunPlan:
    """Wire and run one predict run (a quiet single-device Trainer unless ``trainer`` is given)."""
    import lightning as L

    plan = connect(sampler, datamodule, writer, reference=reference)
    if trainer is None:
        defaults: dict[str, Any] = {"logger": False, "enable_checkpointing": False, "enable_model_summary": False,
                                    "enable_progress_bar": False, "devices": 1, "accelerator": "auto"}
        defaults.update(trainer_kwargs)
        trainer = L.Trainer(callbacks=[writer] if writer is not None else [], **defaults)
    with sampling_thread_count():
        trainer.predict(sampler, datamodule=datamodule, return_predictions=False)
    return plan
