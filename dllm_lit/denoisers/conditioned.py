"""A world's exact posterior given a prompt: the denoiser a sampler runs on to continue a prompt.

A prompt is a canvas c [T] holding revealed tokens (the prefix, or spans anywhere: infilling) and MASK = V at the
G free positions f_1 < ... < f_G.  The conditioned denoiser answers for a canvas z [B, G] of the free positions
only, in canvas order:

    p(x_{f_j} = v | z, c) = p_world(x_{f_j} = v | the canvas c with z written at the free positions)

so any sampler decodes exactly the G free positions, with its own schedule over them (steps, blocks, positions
counted in canvas order), and an exact sampler draws from the exact conditional law p(x | c).  Absorbing evidence
(and leave-one-out) goes to the base denoiser (the world's exact oracle) on the full canvas; any other channel
(uniform noise, GIDD's mixed noise) goes to the HMM forward-backward with the prompt's positions observed exactly
(:class:`Revealed`: the channel's likelihood rows plus one delta row per token).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import ABSORBING, AbsorbingMask, EvidenceChannel

__all__ = ["ConditionedDenoiser", "Revealed"]


@dataclass(frozen=True)
class Revealed(EvidenceChannel):
    """``channel``'s symbols [0, Z), then Z + v = the clean token v observed exactly (likelihood delta_v)."""

    channel: EvidenceChannel = ABSORBING

    def num_symbols(self, vocab_size: int) -> int:
        return self.channel.num_symbols(vocab_size) + vocab_size

    def likelihood(self, vocab_size: int) -> torch.Tensor:
        return torch.cat([self.channel.likelihood(vocab_size), torch.eye(vocab_size, dtype=torch.float64)])


class ConditionedDenoiser(Denoiser):
    """The exact posterior of the free positions of ``canvas`` [T] (module docstring).

    Args:
        base: the world's exact oracle (``Sampler.connect`` builds it): answers the full canvas.
        canvas: int64 [T], token ids < V at the prompt's positions and V at the free ones.
    """

    def __init__(self, base: Denoiser, canvas: torch.Tensor) -> None:
        super().__init__()
        if base.vocab_size is None:
            raise ValueError("the base denoiser is not bound to a world: connect the sampler first")
        self.base = base
        self.vocab_size = int(base.vocab_size)
        self.chain = getattr(base, "chain", None)
        self.canvas = torch.as_tensor(canvas).long().reshape(-1)
        self.free = (self.canvas == self.vocab_size).nonzero().reshape(-1)
        self.requires_grad_(False)
        self.eval()

    def check_length(self, seq_len: int) -> None:
        if seq_len != self.free.numel():
            raise ValueError(f"the prompt leaves {self.free.numel()} positions free; the sampler was asked for {seq_len}")

    def describe(self) -> dict:
        return {"denoiser": "conditioned", "base": self.base.describe(), "free": int(self.free.numel()),
                "length": int(self.canvas.numel())}

    def _full(self, z: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        if z.dim() != 2 or z.shape[1] != self.free.numel():
            raise ValueError(f"z must have shape [B, {self.free.numel()}] (the prompt's free positions), "
                             f"got {tuple(z.shape)}")
        full = fill.to(z.device).expand(z.shape[0], -1).clone()
        full[:, self.free.to(z.device)] = z.long()
        return full

    def supports(self, channel: EvidenceChannel, leave_one_out: bool = False) -> bool:
        if isinstance(channel, AbsorbingMask):
            return self.base.supports(channel, leave_one_out)
        return self._world() is not None and isinstance(channel, EvidenceChannel)

    def _world(self):
        """The HMMWorld behind the base oracle (None for a denoiser that is not an exact HMM oracle)."""
        from dllm_lit.markov import HMMWorld, MarkovChain

        world = getattr(self.base, "world", None) or getattr(self.base, "chain", None)
        if isinstance(world, MarkovChain):
            from dllm_lit.markov.world_api import exact_world

            return exact_world(world).world
        return world if isinstance(world, HMMWorld) else None

    def log_posterior(self, z: torch.Tensor, channel: EvidenceChannel | None = None,
                      leave_one_out: bool = False) -> torch.Tensor:
        channel = ABSORBING if channel is None else channel
        free = self.free.to(z.device)
        if isinstance(channel, AbsorbingMask):
            return self.base.log_posterior(self._full(z, self.canvas), channel, leave_one_out)[:, free]
        world = self._world()
        if world is None:
            raise ValueError(f"{type(self.base).__name__} answers absorbing masks only: a prompted run under the "
                             f"{channel.describe()['channel']} channel needs the exact oracle of an HMM world or chain")
        from dllm_lit.denoisers.hmm_posterior import hmm_posterior

        Z = channel.num_symbols(self.vocab_size)
        coded = torch.where(self.canvas < self.vocab_size, self.canvas + Z, 0)  # the prompt: observed exactly
        post = hmm_posterior(world, self._full(z, coded), Revealed(channel), leave_one_out)
        dtype = getattr(self.base, "dtype", torch.float32)
        return post[:, free].to(dtype if isinstance(dtype, torch.dtype) else torch.float32).log()

    def posterior(self, z: torch.Tensor, channel: EvidenceChannel | None = None,
                  leave_one_out: bool = False) -> torch.Tensor:
        channel = ABSORBING if channel is None else channel
        if isinstance(channel, AbsorbingMask):  # the base's own numbers (a local oracle's probabilities)
            return self.base.posterior(self._full(z, self.canvas), channel, leave_one_out)[:, self.free.to(z.device)]
        return self.log_posterior(z, channel, leave_one_out).exp()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.log_posterior(z)
