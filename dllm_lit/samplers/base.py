"""Base LightningModule for reverse-diffusion samplers driven by a frozen denoiser.

A sampler is wired once (:meth:`Sampler.connect`): it receives the ground-truth chain, builds the
exact oracle if no denoiser was given, binds the denoiser to the chain's vocabulary and validates
its options.  Its rows (one per value of the ``steps`` grid) go into a
:class:`dllm_lit.engine.plan.RunPlan`; ``predict_step`` runs one work item of that plan.

All randomness is keyed by (seed, sequence index, steps, step, position), so a sequence's sample
does not depend on the batch, the chunking or the number of processes.
"""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from dllm_lit import checks, rng
from dllm_lit.util.code_identity import source_digest
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.engine.budget import check_steps_count
from dllm_lit.engine.plan import Row
from dllm_lit.engine.process_group import release_process_group
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.util.user_code import user_code

if TYPE_CHECKING:
    from dllm_lit.engine.plan import RunPlan

__all__ = ["Sampler", "NFECountingSampler", "compact_dtype", "SEQUENCE_STATS"]

#: per-sequence statistics every sampler reports with its samples (float64 [B] each, NaN = not available):
#: ``nfe`` - denoiser evaluations; ``log_q`` - log p_s(x | unmasking order), the log-probability of the
#: sample under the laws the sampler drew its tokens from (samplers whose order does not depend on the tokens)
SEQUENCE_STATS = ("nfe", "log_q")


def compact_dtype(vocab_size: int) -> torch.dtype:
    """Smallest integer dtype holding ids in [0, V] (uint8 / int16 / int32)."""
    if vocab_size < 256:
        return torch.uint8
    if vocab_size < 2**15:
        return torch.int16
    return torch.int32


class Sampler(L.LightningModule, ABC):
    """Common machinery: denoiser wiring, step grid, settings, ``predict_step`` and ``sample``.

    Args:
        denoiser: any :class:`Denoiser`; None (the usual case) builds the exact
            :class:`~dllm_lit.denoisers.OracleDenoiser` of the chain at wiring.
        steps: number of sampling steps, or a grid of distinct values (one results row each).
    """

    #: name written in result rows; subclasses override or derive it from options
    sampler_name: str = "sampler"
    #: False for samplers that draw from the chain itself (AR) and need no denoiser
    requires_denoiser: bool = True
    #: True for samplers that decode in blocks and tell their denoiser (``Denoiser.block_start``) which is active
    announces_blocks: bool = False

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128) -> None:
        super().__init__()
        if denoiser is not None and not isinstance(denoiser, Denoiser):
            raise ValueError(f"denoiser must be a dllm_lit.denoisers.Denoiser (or null for the exact oracle), "
                             f"got {type(denoiser).__name__}")
        if isinstance(steps, (list, tuple)):
            check_steps_count("steps", len(steps))
        self.steps_grid: list[int] = checks.integer_list("steps", steps)
        self.denoiser = denoiser
        self.chain: MarkovChain | None = getattr(denoiser, "chain", None)
        self.plan: RunPlan | None = None
        if denoiser is not None:
            denoiser.requires_grad_(False).eval()

    # ------------------------------------------------------------------ wiring
    @property
    def name(self) -> str:
        return self.sampler_name

    def connect(self, chain: MarkovChain, cache_dir: str | Path | None = None) -> "Sampler":
        """Wire the chain: build its oracle if no denoiser was given, bind the denoiser, check options.

        ``cache_dir`` (the data module's) caches the oracle's power table on disk for large chains.
        """
        if self.requires_denoiser:
            if self.denoiser is None:
                from dllm_lit.denoisers.oracle import OracleDenoiser
                from dllm_lit.markov.hmm import HMMWorld

                if isinstance(chain, HMMWorld):  # beyond first order: the HMM oracle, generic sampler paths
                    from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser

                    self.denoiser = HMMOracleDenoiser(chain).to(self.device)
                else:
                    self.denoiser = OracleDenoiser(chain, cache_dir=cache_dir).to(self.device)
            else:
                self.denoiser.bind(chain)
            why = self.denoiser.needs_blocks
            if why is not None and not self.announces_blocks:
                raise ValueError(f"{type(self).__name__} cannot drive this denoiser: {why}, and {type(self).__name__} "
                                 "does not announce blocks (use a block sampler: LLaDA with low_confidence, "
                                 "FastDLLM or another rule sampler; or cache: none / delayed)")
        self.chain = chain
        self.check_options()
        return self

    def use_plan(self, plan: "RunPlan") -> None:
        """Run the work items of ``plan``; checks every row's settings (and the denoiser) for the plan's length."""
        if self.denoiser is not None:
            self.denoiser.check_length(plan.seq_len)
        for row in plan.rows:
            if row.sampler is self:
                self.check_run(plan.seq_len, row.steps)
        self.plan = plan

    def check_options(self) -> None:
        """Check option combinations that need the chain / denoiser (subclasses extend)."""

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """Check that a run of ``seq_len`` tokens with ``steps`` steps is possible (subclasses extend)."""

    def settings(self) -> dict[str, Any]:
        """The constructor options, the denoiser's description and ``code`` (:func:`~dllm_lit.util.code_identity.source_digest`),
        for run metadata and resume checks."""
        out: dict[str, Any] = {"class": type(self).__name__}
        for name in inspect.signature(type(self).__init__).parameters:
            if name in ("self", "denoiser"):
                continue
            value = self.steps_grid if name == "steps" else getattr(self, name, None)
            out[name] = value
        out["denoiser"] = self.denoiser.describe() if self.denoiser is not None else None
        # the source of this sampler, its denoiser and the dllm_lit code they use: an edit invalidates kept rows
        out["code"] = source_digest(type(self), *([type(self.denoiser)] if self.denoiser is not None else []))
        return out

    def rows(self) -> list["Row"]:
        """One results row per value of the steps grid."""
        return [Row(self.name, s, self) for s in self.steps_grid]

    @property
    def vocab_size(self) -> int:
        if self.denoiser is not None and self.denoiser.vocab_size is not None:
            return int(self.denoiser.vocab_size)
        if self.chain is not None:
            return self.chain.vocab_size
        raise ValueError(f"{type(self).__name__} is not connected to a chain: call connect(chain) first")

    @property
    def mask_id(self) -> int:
        return self.vocab_size

    # ------------------------------------------------------------------ sampling
    @abstractmethod
    def generate(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> torch.Tensor:
        """Run the reverse diffusion for sequences ``indices``; returns LongTensor[B, T] in [0, V)."""

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """Denoiser evaluations per sequence for a run with ``steps`` steps (None: no denoiser).

        One evaluation = one (batched) denoiser forward in which the sequence takes part.  The default
        is one per step; samplers with a final fill or adaptive step counts override this or
        :meth:`generate_with_nfe`.
        """
        return None if not self.requires_denoiser or steps is None else float(steps)

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`generate` plus the denoiser evaluations of each sequence: (LongTensor[B, T], float64[B]; NaN = none).

        Adaptive samplers (whose step count depends on the draws) override this to count per sequence.
        """
        x = self.generate(indices, seq_len, steps, seed)
        n = self.nfe(seq_len, steps)
        return x, torch.full((indices.numel(),), float("nan") if n is None else n, dtype=torch.float64)

    #: also score the reference row's exact samples under the per-order law in :meth:`generate_with_stats`
    #: (the forward-KL statistics of :mod:`~dllm_lit.samplers.reference_scoring`; a second decoding pass), for
    #: samplers whose order ignores the tokens; :func:`dllm_lit.engine.connect` sets it from ``results.forward_kl``
    score_reference: bool = False

    #: why :meth:`generate_with_stats` reports no ``log_q`` (a sampler that records it overrides :meth:`log_q_reason`)
    no_log_q_reason: str = "this sampler does not record its path probability"

    def log_q_reason(self, steps: int | None) -> str | None:
        """None when rows with ``steps`` report ``log_q``; otherwise why not (for docs and messages)."""
        return self.no_log_q_reason

    #: fresh orders K of the importance-weighted path sandwich (:mod:`~dllm_lit.samplers.path_sandwich`; 0: off),
    #: for samplers whose order ignores the tokens; :func:`dllm_lit.engine.connect` sets it from
    #: ``results.metric_options.sandwich_paths``
    sandwich_paths: int = 0

    #: "orders" (fresh uniform orders) or "smc" (the SMC over reveal states, :mod:`~dllm_lit.samplers.path_smc`, for
    #: samplers with a path law; the others keep "orders"); ``results.metric_options.sandwich_method``
    sandwich_method: str = "orders"

    def sandwich_refusal(self) -> str | None:
        """Why the sandwich the run asks for (``sandwich_paths``, ``sandwich_method``) cannot be computed for this
        sampler's options, or None; the wiring refuses such a run before any sampling."""
        return None

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """Whether this sampler's law at (``seq_len``, ``steps``) is the chain's own law when its denoiser is the
        exact oracle (override where it is: one position per step from its exact conditional, exact chain sampling)."""
        return False

    def law_is_exact(self, seq_len: int, steps: int | None) -> bool:
        """:meth:`declares_exact` with the exact oracle of the sampler's chain or HMM world (or no denoiser): the
        sequence KL is then exactly 0, whatever the float rounding of log q - log p (``seq_kl_upper`` reads 0)."""
        if not self.declares_exact(seq_len, steps):
            return False
        if not self.requires_denoiser:
            return True
        from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser
        from dllm_lit.denoisers.oracle import OracleDenoiser

        return isinstance(self.denoiser, (OracleDenoiser, HMMOracleDenoiser)) and self.denoiser.chain is self.chain

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`generate` plus per-sequence statistics ``{name: float64[B]}`` over :data:`SEQUENCE_STATS`.

        ``log_q`` is log p_s(x | order) = sum over committed positions of log q(x_i), q the law the token
        was drawn from (after temperature, nucleus, ...; 1 for an argmax), for samplers whose unmasking
        order does not depend on the drawn tokens; NaN otherwise.  The default reports NaN; samplers that
        record it override this method.  The samples are those of :meth:`generate`, draw for draw.
        """
        x, nfe = self.generate_with_nfe(indices, seq_len, steps, seed)
        return x, {"nfe": nfe, "log_q": torch.full_like(nfe, float("nan"))}

    @staticmethod
    def _log_q_buffer(indices: torch.Tensor, seq_len: int) -> torch.Tensor:
        """Per-position log q, float64 [B, T] zeros (positions never drawn - a fixed prompt - keep 0)."""
        return torch.zeros((indices.numel(), seq_len), dtype=torch.float64, device=indices.device)

    @staticmethod
    def _stats(nfe: torch.Tensor | float | None, log_q: torch.Tensor, batch: int) -> dict[str, torch.Tensor]:
        """``{"nfe", "log_q"}`` from an NFE (per sequence, a constant, or None) and a [B, T] log q buffer."""
        if not isinstance(nfe, torch.Tensor):
            nfe = torch.full((batch,), float("nan") if nfe is None else float(nfe), dtype=torch.float64)
        return {"nfe": nfe.to(torch.float64).cpu(), "log_q": log_q.sum(1).cpu()}

    @torch.no_grad()
    def sample(
        self,
        num_sequences: int,
        seq_len: int,
        steps: int | None = None,
        generator: torch.Generator | None = None,
        *,
        seed: int | None = None,
        start_index: int = 0,
    ) -> torch.Tensor:
        """Draw ``num_sequences`` samples of length ``seq_len`` with ``steps`` steps (first grid value if None).

        Sequence ``start_index + n`` depends only on (seed, its index): without ``seed`` one is drawn
        from ``generator`` (torch's global RNG if None).
        """
        if self.chain is None and (self.denoiser is None or self.denoiser.vocab_size is None):
            raise ValueError(f"{type(self).__name__} has no denoiser or chain yet: call connect(chain) first")
        checks.integer("num_sequences", num_sequences)
        checks.integer("seq_len", seq_len)
        steps = self.steps_grid[0] if steps is None else checks.integer("steps", steps)
        self.check_options()
        self.check_run(int(seq_len), steps)
        if seed is None:
            seed = rng.seed_from_generator(generator)
        idx = torch.arange(start_index, start_index + int(num_sequences), device=self.device)
        if self.denoiser is not None:
            self.denoiser.decode_start(idx.numel())
        return self.generate(idx, int(seq_len), steps, seed)

    @torch.no_grad()
    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """One work item {"row", "index", "seq_len", "seed"} of the plan -> its samples (compact dtype), NFE and
        per-sequence statistics ``"stats": {name: float64[B]}`` (:data:`SEQUENCE_STATS`)."""
        if self.plan is None:
            raise ValueError("the sampler has no run plan: wire the run with dllm_lit.engine.connect(...)")
        if int(batch["row"]) < 0:  # an idle process's placeholder item: nothing to sample
            empty = torch.zeros(0, int(batch["seq_len"]), dtype=compact_dtype(self.vocab_size))
            return {"row": -1, "index": batch["index"], "samples": empty, "nfe": torch.zeros(0, dtype=torch.float64)}
        row = self.plan.rows[int(batch["row"])]
        idx = batch["index"].to(self.device)
        if row.sampler.denoiser is not None:
            row.sampler.denoiser.decode_start(idx.numel())
        with user_code(f"the sampler {row.name}"):  # a SystemExit in a user's sampler class ends nothing silently
            x, stats = row.sampler.generate_with_stats(idx, int(batch["seq_len"]), row.steps, int(batch["seed"]))
        stats = {k: v.cpu() for k, v in stats.items()}
        stats["exact_law"] = torch.full((idx.numel(),), float(row.sampler.law_is_exact(int(batch["seq_len"]), row.steps)),
                                        dtype=torch.float64)
        return {"row": int(batch["row"]), "index": idx.cpu(), "samples": x.to(compact_dtype(self.vocab_size)).cpu(),
                "nfe": stats["nfe"], "stats": stats}

    def configure_optimizers(self) -> None:  # sampling only: nothing to train
        return None

    def teardown(self, stage: str) -> None:
        """The run's last hook: release the DDP process group (see :mod:`dllm_lit.engine.process_group`)."""
        release_process_group(self._trainer)


class NFECountingSampler(Sampler):
    """A sampler that counts each sequence's denoiser calls while it decodes (adaptive step counts, per-sequence
    loops): it implements :meth:`generate_with_nfe`, and :meth:`generate` returns those samples."""

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    @abstractmethod
    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int | None,
                          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(LongTensor[B, T] samples, float64[B] denoiser calls per sequence)."""
