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
There is a single results row per sampler, reported with steps = None.  No denoiser is needed.
See ``docs/samplers/ar.md``.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.util.code_identity import source_digest
from dllm_lit.engine.plan import Row
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import sharpen

__all__ = ["AR", "sharpened_rows"]


def sharpened_rows(chain: MarkovChain, beta: float) -> torch.Tensor:
    """normalise(P_topK(. | i)^beta) over each top-K list: float64 [V, K] (``nbr_prob`` at beta = 1)."""
    if beta == 1:
        return chain.nbr_prob
    p = sharpen(chain.nbr_prob, beta)  # zero entries stay zero for beta > 0
    return p / p.sum(1, keepdim=True)


class AR(Sampler):
    """Exact (beta = 1) or sharpened autoregressive chain sampler (see module docstring).

    It needs no denoiser and has no steps: its single row has steps = None.  With beta = 1 its row
    is the run's reference row (exact chain samples), so the run plan adds no second one.

    Args:
        beta: sharpening exponent > 0 applied to the top-K part of each row (1 = exact).
        chain: the chain to sample (default: the run's chain, given at wiring).
    """

    sampler_name = "ar"
    requires_denoiser = False

    def __init__(self, beta: float = 1.0, chain: MarkovChain | None = None) -> None:
        super().__init__(denoiser=None, steps=1)
        self.beta = checks.real("beta", beta, 0.0, low_open=True)
        if chain is not None:
            self.connect(chain)

    @property
    def name(self) -> str:
        return "ar" if self.beta == 1 else f"ar_beta{self.beta:g}"

    def rows(self) -> list:
        return [Row(self.name, None, self, reference=self.beta == 1)]

    def settings(self) -> dict:
        return {"class": "AR", "beta": self.beta, "denoiser": None, "code": source_digest(type(self))}

    def nfe(self, seq_len: int, steps: int | None) -> None:
        """None: exact chain sampling evaluates no denoiser."""
        return None

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the sampler's own law is known exactly (log q = log p_beta(x))."""
        return None

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Exact log p_beta(x) of sequences x [N, T] under this sampler (the chain's ``log_prob`` at beta = 1):
        log pi(x_0) + sum_t log((1 - eps) P_topK,beta(x_t | x_{t-1}) + eps nu(x_t)).  Float64 [N]."""
        chain = self.chain
        if self.beta == 1:
            return chain.log_prob(x)
        x = x.cpu().long()
        prev, nxt = x[:, :-1], x[:, 1:]
        rows = sharpened_rows(chain, self.beta)
        top = (rows[prev] * (chain.nbr_idx[prev] == nxt[..., None])).sum(-1)  # P_topK,beta(nxt | prev)
        step = ((1.0 - chain.eps) * top + chain.eps * chain.nu[nxt]).log().sum(1)
        return chain.stationary.log()[x[:, 0]] + step

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """beta = 1: exact chain sampling."""
        return self.beta == 1

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int):
        """Samples with log q = log p_beta(x): AR's path is its sample, so the sequence KL estimate
        mean(log q - log p) is unbiased for the exact KL(p_beta || p) (0 at beta = 1)."""
        x = self.generate(indices, seq_len, steps, seed)
        log_q = self.log_prob(x).to(torch.float64)
        return x, {"nfe": torch.full((indices.numel(),), float("nan"), dtype=torch.float64), "log_q": log_q.cpu()}

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> torch.Tensor:
        """x_0 ~ pi, x_t ~ P_beta(. | x_{t-1}): ``MarkovChain.sample`` with the sharpened top-K rows."""
        if self.chain is None:
            raise ValueError("AR needs a chain: pass chain= or call connect(chain)")
        start = int(indices[0])
        if not torch.equal(indices.cpu(), torch.arange(start, start + indices.numel())):
            raise ValueError("AR chunks must hold consecutive sequence indices")
        if not isinstance(self.chain, MarkovChain):  # an HMM world: exact samples only (check_options)
            return self.chain.sample(indices.numel(), int(seq_len), seed=seed, start_index=start, device=indices.device)
        return self.chain.sample(indices.numel(), int(seq_len), seed=seed, start_index=start, device=indices.device,
                                 topk_probs=sharpened_rows(self.chain, self.beta))

    def check_options(self) -> None:
        """Sharpening (beta != 1) acts on a first-order chain's top-K rows; an HMM world is sampled exactly."""
        if self.beta != 1 and self.chain is not None and not isinstance(self.chain, MarkovChain):
            raise ValueError(f"beta must be 1 in an HMM world (sharpening needs a first-order chain), got {self.beta:g}")
