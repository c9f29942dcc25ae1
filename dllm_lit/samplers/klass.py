"""KLASS: KL-Adaptive Stability Sampling; see ``docs/samplers/klass.md``.

Kim et al., "KLASS: KL-Adaptive Stability Sampling for Fast Inference in Masked Diffusion Models"
(arXiv:2511.05664); followed in shkim0116/KLASS ``src/model/llada_klass.py``
(``stable_confident_decode`` with ``alg="klass"``, ``unmask_strategy="all"``).

LLaDA's semi-autoregressive loop (blocks of ``block_length``, S = steps / blocks steps per block,
LLaDA's transfer counts k_s) with an extra commit rule.  At step s of a block, for every sequence
whose block still has masked positions (one denoiser call; a finished block is skipped):

* p_l = p(x0_l | z) at every masked position l of the block; proposal x̂_l = argmax p_l
  (temperature 0, upstream default) or x̂_l ~ p_l^(1/tau); confidence c_l = p_l(x̂_l);
* KL_l = sum_v p_l(v) [log(p_l(v) + 1e-12) - log(q_l(v) + 1e-12)], q_l = position l's row at the
  sequence's previous denoiser call (the previous block's last call at s = 0; all zeros before the
  first call), kept in a history of the last H values;
* ready: s >= H - 1 and the last H KL values are all < ``kl_threshold`` and c_l > ``conf_threshold``;
* if any position is ready, every ready position commits its proposal; otherwise the k_s most
  confident masked positions of the block commit (ties -> lower position), as LLaDA.

Departures from upstream (both only where upstream would misbehave; see the docs page):

* the fallback takes min(k_s, #masked) positions: upstream's ``topk`` would also pick positions
  that are already decoded or outside the block when ready steps got ahead of the schedule;
* the last step of a block commits every remaining proposal: upstream can otherwise leave MASK
  tokens in a block for good (ready steps that commit fewer than k_s tokens).

The sampler is a rule (:mod:`dllm_lit.samplers.rule`): LLaDA's proposal, confidence, blocks and counts, the KL as
its declared ``divergence`` (``stability_history`` = H), and the commit rule above as ``stable_commits``.  The engine
(:mod:`dllm_lit.decoding.stability_decoding`) keeps the previous rows (B x block x V float64; none in the one block
of the cached greedy path, which computes KL values from neighbours only where the ready test reads them) and counts
the NFE: one per step at which the sequence's block still had a masked position.  Uniforms: Stream.TOKEN at (global
step, position).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import block_bounds
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.samplers.selection import topk_stable_mask

__all__ = ["KLASS", "KL_EPS", "stability_kl", "stable_top_k"]

#: upstream's additive epsilon inside both logarithms of the KL
KL_EPS = 1e-12


def stability_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KLASS's KL(p || q) per row in float64, with 1e-12 added inside both logarithms (upstream formula)."""
    p, q = p.to(torch.float64), q.to(torch.float64)
    return (p * (torch.log(p + KL_EPS) - torch.log(q + KL_EPS))).sum(-1)


def stable_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`~dllm_lit.samplers.selection.topk_stable_mask` of ``scores`` [n, L]; for k = 1 the first maximum of
    each row (``argmax`` returns the first maximal index), no partial selection."""
    if k != 1:
        return topk_stable_mask(scores, k)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    return mask.scatter_(1, scores.argmax(1, keepdim=True), True)


class KLASS(RuleSampler):
    """KLASS decoding (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: total steps (or a grid); must be divisible by the number of blocks.
        conf_threshold: tau_c in (0, 1]: commit only if the proposal's probability exceeds it (upstream 0.9).
        kl_threshold: tau_KL >= 0: every one of the last ``history`` KL values must be below it (upstream 0.01).
        history: H >= 1, number of KL values checked (upstream 2).
        block_length: semi-autoregressive block length; None = one block of length T (upstream scripts use 64).
        temperature: tau >= 0 of the proposal (upstream 0 = argmax).
    """

    sampler_name = "klass"
    no_log_q_reason = "positions are committed by the confidence and step-to-step KL of the drawn proposals, so the order depends on the tokens"
    announces_blocks = False

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, conf_threshold: float = 0.9,
                 kl_threshold: float = 0.01, history: int = 2, block_length: int | None = None,
                 temperature: float = 0.0) -> None:
        super().__init__(denoiser, steps)
        self.conf_threshold = checks.probability("conf_threshold", conf_threshold)
        self.stability_threshold = self.kl_threshold = checks.real("kl_threshold", kl_threshold, 0.0)
        self.stability_history = self.history = checks.integer("history", history)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.temperature = checks.real("temperature", temperature, 0.0)

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # p^(1/tau); None (argmax) at tau = 0

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
        return probs.gather(1, tok[:, None]).squeeze(1).to(torch.float64)  # the confidence p(x̂)

    def divergence(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return stability_kl(p, q)

    def blocks(self, seq_len: int) -> list[tuple[int, int]]:
        return block_bounds(seq_len, 0, self.block_length)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_length divides T and steps divide into the blocks (upstream asserts both)."""
        checks.divides("block_length", self.block_length, seq_len)
        nb = len(self.blocks(seq_len))
        if steps is not None and steps % nb:
            raise ValueError(f"steps={steps} must be divisible by the number of blocks ({nb}) for seq_len={seq_len}")

    def stability_read(self, scores: torch.Tensor) -> torch.Tensor:
        return scores > self.conf_threshold  # ready needs a confident proposal first

    def stable_commits(self, scores: torch.Tensor, stable: torch.Tensor, masked: torch.Tensor, k: int,
                       last: bool) -> torch.Tensor:
        """Every masked position at the block's last step; else, in a row with a ready position (confident and
        stable), the ready ones; else the stable top k of the confidences (ties -> lower position)."""
        if last:
            return masked
        ready = (scores > self.conf_threshold) & stable
        any_ready = ready.any(1, keepdim=True)
        if not bool((masked.any(1, keepdim=True) & ~any_ready).any()):
            return ready
        return torch.where(any_ready, ready, stable_top_k(scores, k) & masked)
