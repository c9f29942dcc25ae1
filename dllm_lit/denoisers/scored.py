"""Per-call posterior error: a wrapper that scores every call of a denoiser against the exact oracle at the same state.

    denoiser:
      class_path: dllm_lit.denoisers.ScoredDenoiser
      init_args:
        denoiser: {class_path: dllm_lit.denoisers.CheckpointDenoiser, init_args: {path: ...}}

:class:`ScoredDenoiser` answers every query with the wrapped denoiser's numbers (so a sampler draws exactly what it
draws without the wrapper) and, at the positions the query reads, asks the exact oracle at the same state z:

* an absorbing query (``forward``, ``probs_at``, ``log_probs_at``): the masked positions it reads, against
  p(x0_i | z);
* a leave-one-out or other-channel query (``log_posterior``, ``posterior``; editing samplers): every position it
  reads, against the oracle's answer to the same channel (p(x0_i | z_{-i}) for leave-one-out).

Each read position is scored once per state of its row (:func:`~dllm_lit.metrics.functional.posterior_error.
posterior_error`: KL(p_exact || p_model) and top-1 agreement).  A row's *step* is the number of distinct states it
has shown since the sampler's ``decode_start``, so :meth:`ScoredDenoiser.summary` gives a profile over the reverse
process as well as per-sequence totals.  Cost: one oracle query per model query (its time is kept in
``seconds``, so a timed run can leave it out); runs without the wrapper pay nothing.  The reference oracle is built when the run is wired: the float64 :class:`OracleDenoiser` of the chain
(mixing tolerance 1e-11), or the exact HMM oracle of an HMM world.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from dllm_lit.denoisers.base import Denoiser
from dllm_lit.metrics.functional.posterior_error import posterior_error

if TYPE_CHECKING:
    from dllm_lit.markov.chain import MarkovChain

__all__ = ["ScoredDenoiser", "REFERENCE_MIXING_TOL"]

#: mixing tolerance of the float64 reference oracle (its posteriors are exact to about twice this)
REFERENCE_MIXING_TOL = 1e-11


class ScoredDenoiser(Denoiser):
    """``denoiser``'s answers, each scored against ``reference`` (None: the exact oracle built at :meth:`bind`)."""

    def __init__(self, denoiser: Denoiser, reference: Denoiser | None = None) -> None:
        super().__init__()
        if not isinstance(denoiser, Denoiser) or (reference is not None and not isinstance(reference, Denoiser)):
            raise ValueError("ScoredDenoiser needs denoiser (and reference, if given) to be dllm_lit Denoisers")
        self.inner, self.reference = denoiser, reference
        self.vocab_size = denoiser.vocab_size
        self.reset()

    # ------------------------------------------------------------------ wiring and events
    def bind(self, chain: "MarkovChain") -> "ScoredDenoiser":
        self.inner.bind(chain)
        if self.reference is None:
            from dllm_lit.markov.hmm import HMMWorld

            if isinstance(chain, HMMWorld):
                from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser

                self.reference = HMMOracleDenoiser(chain)
            else:
                from dllm_lit.denoisers.oracle import OracleDenoiser

                self.reference = OracleDenoiser(chain, mixing_tol=REFERENCE_MIXING_TOL, dtype=torch.float64)
        self.reference.bind(chain)
        self.vocab_size = chain.vocab_size
        return self

    def check_length(self, seq_len: int) -> None:
        self.inner.check_length(seq_len)

    @property
    def needs_blocks(self) -> str | None:
        return self.inner.needs_blocks

    def decode_start(self, batch: int) -> None:
        self._close_batch()
        self.inner.decode_start(batch)

    def block_start(self, lo: int, hi: int) -> None:
        self.inner.block_start(lo, hi)

    def supports(self, channel, leave_one_out: bool = False) -> bool:
        return self.inner.supports(channel, leave_one_out)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe() | {"scored": True}

    # ------------------------------------------------------------------ queries (the wrapped numbers, scored)
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.inner(z)
        b, p = (z == self.mask_id).nonzero(as_tuple=True)
        self._score(z, b, p, "absorbing", lambda b, p: out[b, p], lambda b, p: self.reference.probs_at(z, b, p))
        return out

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        out = self.inner.log_probs_at(z, batch_index, position_index)
        self._score_at(z, batch_index, position_index, out)
        return out

    def probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        out = self.inner.probs_at(z, batch_index, position_index)
        self._score_at(z, batch_index, position_index, None)
        return out

    def log_posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        out = self.inner.log_posterior(z, channel, leave_one_out)
        self._score_channel(z, channel, leave_one_out, out)
        return out

    def posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        out = self.inner.posterior(z, channel, leave_one_out)
        self._score_channel(z, channel, leave_one_out, None)
        return out

    def _score_at(self, z, b, p, log_q) -> None:
        keep = z[b, p] == self.mask_id  # revealed positions are carried over (SUBS): nothing to score
        b, p = b[keep], p[keep]
        model = ((lambda bb, pp: self.inner.log_probs_at(z, bb, pp)) if log_q is None
                 else (lambda bb, pp, lq=log_q[keep], bk=b, pk=p: _rows_of(lq, bk, pk, bb, pp)))
        self._score(z, b, p, "absorbing", model, lambda bb, pp: self.reference.probs_at(z, bb, pp))

    def _score_channel(self, z, channel, leave_one_out: bool, log_out) -> None:
        from dllm_lit.denoisers.channels import ABSORBING, AbsorbingMask

        channel = ABSORBING if channel is None else channel
        if isinstance(channel, AbsorbingMask) and not leave_one_out:
            b, p = (z == self.mask_id).nonzero(as_tuple=True)
        else:
            b, p = torch.ones_like(z, dtype=torch.bool).nonzero(as_tuple=True)
        kind = f"{channel.describe()}|{leave_one_out}"
        state: dict[str, torch.Tensor] = {}

        def model(bb, pp):
            if log_out is None and "log" not in state:
                state["log"] = self.inner.log_posterior(z, channel, leave_one_out)
            return (state["log"] if log_out is None else log_out)[bb, pp]

        def exact(bb, pp):
            if "ref" not in state:
                state["ref"] = self.reference.posterior(z, channel, leave_one_out)
            return state["ref"][bb, pp]

        self._score(z, b, p, kind, model, exact)

    # ------------------------------------------------------------------ accounting
    def reset(self) -> None:
        """Forget every record."""
        self._z: torch.Tensor | None = None
        self._finished: list[torch.Tensor] = []  # per finished batch: [rows, 3] (kl, positions, agreements)
        self._profile: list[list[float]] = []  # per step: [kl, positions, agreements]
        #: wall and CPU seconds spent scoring (a timed run subtracts them)
        self.seconds = [0.0, 0.0]

    def _close_batch(self) -> None:
        if self._z is not None:
            self._finished.append(self._rows)
        self._z = None

    def _steps(self, z: torch.Tensor) -> None:
        """Advance the step of every row whose state changed since its last query."""
        if self._z is None or self._z.shape != z.shape:
            self._close_batch()
            B = z.shape[0]
            self._z = torch.full_like(z, -1)
            self._step = torch.full((B,), -1, dtype=torch.long, device=z.device)
            self._seen: dict[str, torch.Tensor] = {}
            self._rows = torch.zeros((B, 3), dtype=torch.float64)
        new = (self._z != z).any(1)
        if bool(new.any()):
            self._step += new.long()
            self._z = torch.where(new[:, None], z, self._z)
            for seen in self._seen.values():
                seen[new] = False

    def _score(self, z, b, p, kind: str, model, exact) -> None:
        w0, c0 = time.perf_counter(), time.process_time()
        self._score_now(z, b, p, kind, model, exact)
        self.seconds[0] += time.perf_counter() - w0
        self.seconds[1] += time.process_time() - c0

    def _score_now(self, z, b, p, kind: str, model, exact) -> None:
        self._steps(z)
        seen = self._seen.setdefault(kind, torch.zeros_like(z, dtype=torch.bool))
        key = torch.unique(b * z.shape[1] + p)  # each (row, position) once, however often the query lists it
        b, p = key // z.shape[1], key % z.shape[1]
        fresh = ~seen[b, p]
        b, p = b[fresh], p[fresh]
        if b.numel() == 0:
            return
        seen[b, p] = True
        kl, agree = posterior_error(exact(b, p), model(b, p))
        bc, kl, agree = b.cpu(), kl.cpu(), agree.cpu().to(torch.float64)
        self._rows.index_add_(0, bc, torch.stack([kl, torch.ones_like(kl), agree], 1))
        steps = self._step[b].cpu()
        for j in torch.unique(steps).tolist():
            while len(self._profile) <= j:
                self._profile.append([0.0, 0.0, 0.0])
            sel = steps == j
            row = self._profile[j]
            row[0] += float(kl[sel].sum())
            row[1] += float(sel.sum())
            row[2] += float(agree[sel].sum())

    def per_sequence(self) -> torch.Tensor:
        """float64 [sequences, 3]: per sequence (rows of every batch so far, in order) the summed KL over its scored
        positions, their number and the number of top-1 agreements."""
        rows = self._finished + ([self._rows] if self._z is not None else [])
        return torch.cat(rows) if rows else torch.zeros((0, 3), dtype=torch.float64)

    def summary(self) -> dict[str, Any]:
        """Mean KL and top-1 agreement over every scored position, the KL summed along a sequence (mean over
        sequences), and the profile per step (each step's mean KL, top-1 agreement and scored positions)."""
        seq = self.per_sequence()
        total = seq.sum(0)
        n = float(total[1])
        return {"kl": float(total[0]) / n if n else None, "top1": float(total[2]) / n if n else None,
                "kl_sum_per_sequence": float(seq[:, 0].mean()) if len(seq) else None, "positions": int(n),
                "profile": [{"step": j, "positions": int(c), "kl": k / c if c else None, "top1": a / c if c else None}
                            for j, (k, c, a) in enumerate(self._profile)]}


def _rows_of(values: torch.Tensor, b: torch.Tensor, p: torch.Tensor, bb: torch.Tensor, pp: torch.Tensor) -> torch.Tensor:
    """The rows of ``values`` (answered at pairs (b, p)) for the pairs (bb, pp), a subset of them."""
    T = int(torch.maximum(p.max(), pp.max())) + 1 if p.numel() else 1
    key = b * T + p
    order = torch.argsort(key)
    return values[order[torch.searchsorted(key[order], bb * T + pp)]]
