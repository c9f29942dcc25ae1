"""The exact oracle of an HMM world under any evidence channel (:func:`~dllm_lit.denoisers.hmm_posterior.hmm_posterior`).

Not a :class:`~dllm_lit.denoisers.LocalDenoiser`: beyond the first-order chain a revealed token does not cut the
dependence between its two sides, so samplers take their generic paths (one batched forward-backward per call,
O(B T (S V + cost of m A))).  First-order chains keep :class:`~dllm_lit.denoisers.OracleDenoiser`.
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import ABSORBING, AbsorbingMask, EvidenceChannel
from dllm_lit.denoisers.hmm_posterior import hmm_likelihood_tables, hmm_posterior
from dllm_lit.denoisers.hmm_segments import SegmentedPosterior, segments_apply
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["HMMOracleDenoiser"]


class HMMOracleDenoiser(Denoiser):
    """Exact posterior of an :class:`HMMWorld`, computed in float64 and returned in ``dtype``.

    Under absorbing masks in an order-k context world with positive rows the posterior is solved segment by
    segment between pinned states, with a memo across calls (:mod:`dllm_lit.denoisers.hmm_segments`;
    ``segments=False`` always runs the full forward-backward).

    ``dtype`` float32 (default, as the first-order oracle's rows) rounds away the float64 noise by which rows
    that are equal in exact arithmetic (e.g. every position's marginal with nothing revealed) differ, so
    confidence-ranked samplers see exact ties there and order them by their tie rule; float64 keeps every digit.
    """

    def __init__(self, world: HMMWorld, dtype: torch.dtype = torch.float32, segments: bool = True) -> None:
        super().__init__()
        if not isinstance(world, HMMWorld):
            raise TypeError(f"world must be an HMMWorld, got {type(world).__name__}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.world, self.chain, self.dtype = world, world, dtype
        self.vocab_size = world.vocab_size
        self._tables: OrderedDict = OrderedDict()
        self._segmented = SegmentedPosterior(world) if segments and segments_apply(world) else None
        self.requires_grad_(False)
        self.eval()

    def supports(self, channel: EvidenceChannel, leave_one_out: bool = False) -> bool:
        return isinstance(channel, EvidenceChannel)

    #: likelihood tables kept (least recently used dropped): a uniform-state sampler asks for a new noise level
    #: at every step, so an unbounded memo would grow with the step count
    MAX_TABLES = 8

    def _tables_for(self, channel: EvidenceChannel, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (channel, str(device))
        if key in self._tables:
            self._tables.move_to_end(key)
        else:
            self._tables[key] = hmm_likelihood_tables(self.world, channel, torch.float64, device)
            while len(self._tables) > self.MAX_TABLES:
                self._tables.popitem(last=False)
        return self._tables[key]

    #: bytes of right messages (float64 [rows, T, S]) held at once: the batch is processed in chunks of rows
    MESSAGE_BYTES = 2**29

    @torch.no_grad()
    def log_posterior(self, z: torch.Tensor, channel: EvidenceChannel | None = None,
                      leave_one_out: bool = False) -> torch.Tensor:
        channel = ABSORBING if channel is None else channel
        if self._segmented is not None and isinstance(channel, AbsorbingMask) and not leave_one_out:
            return self._segmented(z).to(device=z.device, dtype=self.dtype).log()
        tables = self._tables_for(channel, z.device)
        rows = max(1, self.MESSAGE_BYTES // (8 * max(z.shape[1], 1) * self.world.num_states))
        out = [hmm_posterior(self.world, z[i:i + rows], channel, leave_one_out, torch.float64, tables).to(self.dtype)
               for i in range(0, z.shape[0], rows)]
        return torch.cat(out).log() if out else torch.empty(0, z.shape[1], self.vocab_size, dtype=self.dtype,
                                                              device=z.device)

    @torch.no_grad()
    def posterior(self, z: torch.Tensor, channel: EvidenceChannel | None = None,
                  leave_one_out: bool = False) -> torch.Tensor:
        """Under absorbing masks exp of :meth:`log_posterior`; under any other channel the float64
        forward-backward probabilities themselves (the uniform-state samplers' numbers)."""
        channel = ABSORBING if channel is None else channel
        if isinstance(channel, AbsorbingMask):
            return super().posterior(z, channel, leave_one_out)
        tables = self._tables_for(channel, z.device)
        rows = max(1, self.MESSAGE_BYTES // (8 * max(z.shape[1], 1) * self.world.num_states))
        out = [hmm_posterior(self.world, z[i:i + rows], channel, leave_one_out, torch.float64, tables)
               for i in range(0, z.shape[0], rows)]
        return torch.cat(out) if out else torch.empty(0, z.shape[1], self.vocab_size, dtype=torch.float64,
                                                      device=z.device)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0 | z) under absorbing masks: [B, T, V] (one-hot rows at revealed positions)."""
        return self.log_posterior(z)

    def describe(self) -> dict:
        return {"denoiser": "hmm_oracle", "states": self.world.num_states, "dtype": str(self.dtype)}
