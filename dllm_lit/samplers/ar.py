"""Exact autoregressive sampling of the chain as a sampler, with optional local sharpening.

The AR row of every results table, and the paper's GenPPL-gaming check (Sec. 6.3, "GenPPL can
be gamed by local sharpening alone"): an autoregressive bigram generator whose transition rows
are sharpened by a factor beta > 0,

    x_0 ~ pi,     x_t ~ P_beta(. | x_{t-1}),
    P_beta(. | i) = (1 - eps) normalise(P_topK(. | i)^beta) + eps nu,

i.e. the top-K part of each row is raised to the power beta and renormalised while the
teleport eps nu is left unchanged (beta = 1 is the exact chain; beta > 1 sharpens, beta < 1
flattens).  The first token is drawn from the stationary law pi unchanged.

Draws use the chain's own counter-based scheme (``MarkovChain.sample``: Stream.CHAIN, one
uniform per position, u < eps picks the teleport), so with beta = 1 the samples equal
``chain.sample`` draw for draw, and every sequence depends only on (seed, sequence index).
``steps`` is ignored: there is a single results row per sampler, reported with steps = None.
No denoiser is needed (none is built).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from dllm_lit.markov.chain import MarkovChain
from dllm_lit.samplers.base import Sampler, compact_dtype

__all__ = ["AR", "sharpened_rows"]


def sharpened_rows(chain: MarkovChain, beta: float) -> torch.Tensor:
    """normalise(P_topK(. | i)^beta) over each top-K list: float64 [V, K] (``nbr_prob`` at beta = 1)."""
    if beta == 1:
        return chain.nbr_prob
    p = chain.nbr_prob.to(torch.float64)
    p = (p / p.amax(1, keepdim=True)) ** beta  # zero entries stay zero for beta > 0
    return p / p.sum(1, keepdim=True)


class AR(Sampler):
    """Exact (beta = 1) or sharpened autoregressive chain sampler (see module docstring).

    Args:
        denoiser: ignored except to find the chain (``denoiser.chain``).
        steps: ignored (accepted for a uniform interface).
        ar_baseline: also emit the exact baseline row "ar" (only meaningful when beta != 1).
        beta: sharpening exponent > 0 applied to the top-K part of each row (1 = exact).
        chain: the chain to sample; taken from the data module when None.
    """

    sampler_name = "ar"
    requires_denoiser = False

    def __init__(self, denoiser=None, steps: int | list[int] = 1, ar_baseline: bool = False,
                 beta: float = 1.0, chain: MarkovChain | None = None) -> None:
        super().__init__(denoiser=denoiser, steps=steps, ar_baseline=ar_baseline)
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"beta must be a finite float > 0 (1 = exact chain), got {beta!r}")
        self.beta = float(beta)
        if chain is not None:
            self.chain = chain

    @property
    def name(self) -> str:
        return "ar" if self.beta == 1 else f"ar_beta{self.beta:g}"

    # ------------------------------------------------------------------ wiring (no denoiser)
    def attach_chain(self, chain: MarkovChain) -> None:
        self.chain = chain

    def validate_settings(self, seq_len: int | None = None) -> None:
        if self.chain is None:
            raise ValueError("AR needs a chain: pass chain=, a denoiser with .chain, or use MarkovDataModule")

    @property
    def vocab_size(self) -> int:
        assert self.chain is not None
        return self.chain.vocab_size

    # ------------------------------------------------------------------ sampling
    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.draw(indices, seq_len, seed, self.beta)

    def draw(self, indices: torch.Tensor, seq_len: int, seed: int, beta: float) -> torch.Tensor:
        """x_0 ~ pi, x_t ~ P_beta(. | x_{t-1}): ``MarkovChain.sample`` with the sharpened top-K rows."""
        self.validate_settings(seq_len)
        start = int(indices[0])
        if not torch.equal(indices.cpu(), torch.arange(start, start + indices.numel())):
            raise ValueError("AR chunks must hold consecutive sequence indices")
        return self.chain.sample(indices.numel(), int(seq_len), seed=seed, start_index=start, device=indices.device,
                                 topk_probs=sharpened_rows(self.chain, beta))

    # ------------------------------------------------------------------ predict rows
    def runs(self) -> list[tuple[str, int | None]]:
        """One row per sampler (steps = None): the exact "ar" row and, if beta != 1, the sharpened one."""
        rows: list[tuple[str, int | None]] = []
        if self.ar_baseline or self.name == "ar":
            rows.append(("ar", None))
        if self.name != "ar":
            rows.append((self.name, None))
        return rows

    @torch.no_grad()
    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        idx = batch["index"].to(self.device)
        T, seed = int(batch["seq_len"]), int(batch["seed"])
        beta = self.beta if batch["sampler"] == self.name else 1.0
        x = self.draw(idx, T, seed, beta)
        return {"index": idx.cpu(), "seed": seed, "sampler": batch["sampler"], "steps": batch["steps"],
                "samples": x.to(compact_dtype(self.vocab_size)).cpu()}
