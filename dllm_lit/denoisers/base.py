"""The interface every denoiser shares (oracle or learned), so samplers never depend on which.

A denoiser maps a partially masked sequence z [B, T] (``mask_id`` = V at masked positions) to
log p(x0_i = v | z) for v in [0, V) - MDLM's "SUBS" parameterisation (Sahoo et al., "Simple and
Effective Masked Diffusion Language Models", arXiv:2406.07524): one-hot at unmasked positions,
no mass on MASK.  For absorbing diffusion the exact posterior does not depend on t, so the
interface has no time argument.

The evidence channel is part of the contract (:mod:`dllm_lit.denoisers.channels`): :meth:`Denoiser.log_posterior`
answers p(x0_i | z) under a named channel (absorbing masks, uniform-state noise at level alpha, GIDD's mixed
noise) and, with ``leave_one_out``, p(x0_i | z_{-i}); :meth:`Denoiser.supports` says which channels a denoiser
answers.  Absorbing masks are every denoiser's default (``forward``); the exact oracles answer every channel, and
a learned uniform-state model declares its own, so they are interchangeable behind the same call.

A denoiser is bound to the ground-truth chain once, at wiring time (:meth:`Denoiser.bind`): a
learned model takes its vocabulary size from the chain or checks it against the chain there.

Sampler events.  A sampler tells its denoiser two things and nothing else: :meth:`Denoiser.decode_start` (a batch
begins) and :meth:`Denoiser.block_start` (block [lo, hi) becomes the active block of a semi-autoregressive decode).
Both are no-ops here; an approximate denoiser whose output depends on the block (a KV cache of the positions outside
it) states why in :attr:`Denoiser.needs_blocks`, and wiring refuses it with a sampler that does not announce blocks
(``Sampler.announces_blocks``).  Steps need no event: a step is a call on a changed state, which the denoiser sees.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from dllm_lit.denoisers.channels import EvidenceChannel
    from dllm_lit.markov.chain import MarkovChain

__all__ = ["Denoiser", "check_tokens"]


def check_tokens(z: torch.Tensor, vocab_size: int, name: str = "z") -> None:
    """Raise ValueError unless z is an integer [B, T] tensor with ids in [0, V] (V = MASK)."""
    if z.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got {tuple(z.shape)}")
    if z.is_floating_point():
        raise ValueError(f"{name} must hold integer token ids, got dtype {z.dtype}")


class Denoiser(nn.Module, ABC):
    """Base class: subclasses implement :meth:`forward`; :meth:`log_probs_at` may be specialised.

    ``vocab_size`` is V (the chain's vocabulary); ``mask_id`` is V.
    """

    vocab_size: int | None = None

    @property
    def mask_id(self) -> int:
        if self.vocab_size is None:
            raise ValueError("the denoiser is not bound to a chain yet: call bind(chain) (the CLI does it)")
        return int(self.vocab_size)

    def bind(self, chain: "MarkovChain") -> "Denoiser":
        """Adopt the chain's vocabulary size V (or check it, if the denoiser already has one)."""
        if self.vocab_size is None:
            self.vocab_size = chain.vocab_size
        elif self.vocab_size != chain.vocab_size:
            raise ValueError(
                f"the denoiser's vocabulary ({self.vocab_size} tokens) differs from the chain's "
                f"({chain.vocab_size} tokens); they must be equal"
            )
        return self

    def check_length(self, seq_len: int) -> None:
        """Refuse, at wiring, a sequence length the denoiser cannot read (the oracle reads any)."""

    @property
    def needs_blocks(self) -> str | None:
        """Why this denoiser needs the sampler's :meth:`block_start` events (e.g. "cache='dual' ..."), or None."""
        return None

    def decode_start(self, batch: int) -> None:
        """Event: a sampler begins decoding a batch of ``batch`` sequences (module docstring)."""

    def block_start(self, lo: int, hi: int) -> None:
        """Event: positions [lo, hi) become the active block; the sampler commits only there until the next one."""

    def describe(self) -> dict[str, Any]:
        """What this denoiser is, for run metadata (class name and identifying settings)."""
        return {"denoiser": type(self).__name__}

    @abstractmethod
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0_i = v | z) for every position: Tensor[B, T, V]."""

    def supports(self, channel: "EvidenceChannel", leave_one_out: bool = False) -> bool:
        """Whether :meth:`log_posterior` answers ``channel`` (absorbing masks, not leave-one-out, by default)."""
        from dllm_lit.denoisers.channels import AbsorbingMask

        return isinstance(channel, AbsorbingMask) and not leave_one_out

    def log_posterior(self, z: torch.Tensor, channel: "EvidenceChannel | None" = None,
                      leave_one_out: bool = False) -> torch.Tensor:
        """log p(x0_i = v | z) (or | z_{-i} with ``leave_one_out``) under ``channel`` (None: absorbing): [B, T, V].

        The default answers the absorbing channel by :meth:`forward`; denoisers that answer more override it
        and :meth:`supports`."""
        from dllm_lit.denoisers.channels import ABSORBING

        channel = ABSORBING if channel is None else channel
        if not self.supports(channel, leave_one_out):
            raise ValueError(f"{type(self).__name__} does not answer the {channel.describe()['channel']} channel"
                             f"{' (leave-one-out)' if leave_one_out else ''}; it answers absorbing masks only")
        return self.forward(z)

    def posterior(self, z: torch.Tensor, channel: "EvidenceChannel | None" = None,
                  leave_one_out: bool = False) -> torch.Tensor:
        """:meth:`log_posterior` as probabilities: [B, T, V].  The default exponentiates it; a denoiser that computes
        probabilities directly (a :class:`~dllm_lit.denoisers.LocalDenoiser`) returns them, so that a sampler reading
        probabilities gets its numbers and not exp(log p) (``docs/exactness.md``, "Ties")."""
        return self.log_posterior(z, channel, leave_one_out).exp()

    def transient_posterior(self, z: torch.Tensor, channel: "EvidenceChannel") -> torch.Tensor:
        """:meth:`posterior` leave-one-out for a caller that is done with the result before its next call (it
        neither keeps nor writes it): the same numbers, possibly in a buffer the next call reuses.  The default
        is :meth:`posterior` itself."""
        return self.posterior(z, channel, leave_one_out=True)

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """log p(x0 | z) at the listed (batch, position) pairs only: Tensor[n, V].

        The default runs :meth:`forward` on the rows involved; local denoisers answer in O(n V).
        """
        return self.forward(z)[batch_index, position_index]

    def probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """p(x0 | z) at the listed positions (rows sum to one): Tensor[n, V]."""
        return self.log_probs_at(z, batch_index, position_index).exp()
