r"""Greedy decoders scored exactly: each output against the world's most likely sequences given its prompt.

For an output x with prompt canvas c (its revealed tokens; all MASK without a prompt) and G free positions:

* ``log p(x | c) = log p(x) - log p(c)`` (the world's forward algorithm);
* the mode ``x* = argmax_y p(y | c)`` and the k best sequences by exact best-first max-product search
  (:mod:`dllm_lit.markov.max_product`; enumeration for a world without its own search);
* per-token regret ``(log p(x* | c) - log p(x | c)) / G >= 0``, 0 for a decoder that finds the mode;
* ``is_mode``: log p(x | c) within :data:`MODE_TOL` of the mode's (probabilities equal in exact arithmetic, e.g. a
  first-order chain's permuted transitions, count as modes);
* rank ``1 + #{y : log p(y | c) > log p(x | c) + MODE_TOL}`` when x is among the ``rank_limit`` best, else
  ``rank_limit + 1`` (read: beyond the list).

One search per distinct canvas.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dllm_lit.markov.world_api import exact_world

__all__ = ["MODE_TOL", "GreedyScores", "greedy_scores", "prefix_canvases"]

#: nats: log-probabilities this close count as equal (float64 forward algorithm: |error| ~ 1e-13 at T = 1024)
MODE_TOL = 1e-9


@dataclass
class GreedyScores:
    """Per output, float64 / int64 [N]: ``log_p`` = log p(x | c), ``mode_log_p`` = log p(x* | c), ``free`` = G,
    ``rank`` (``rank_limit + 1`` = beyond the list)."""

    log_p: torch.Tensor
    mode_log_p: torch.Tensor
    free: torch.Tensor
    rank: torch.Tensor

    @property
    def is_mode(self) -> torch.Tensor:
        return self.log_p >= self.mode_log_p - MODE_TOL

    @property
    def regret(self) -> torch.Tensor:
        """(log p(x* | c) - log p(x | c)) / G per output; exactly 0 for a mode."""
        gap = (self.mode_log_p - self.log_p) / self.free.to(torch.float64)
        return torch.where(self.is_mode, torch.zeros_like(gap), gap)


def prefix_canvases(x: torch.Tensor, prompt_length: int, mask_id: int) -> torch.Tensor:
    """Each output's prompt canvas when its first ``prompt_length`` tokens are the prompt: [N, T]."""
    c = torch.full_like(x.long().cpu(), mask_id)
    c[:, :prompt_length] = x.long().cpu()[:, :prompt_length]
    return c


@torch.no_grad()
def greedy_scores(world, x: torch.Tensor, canvases: torch.Tensor | None = None, rank_limit: int = 20,
                  searches: dict | None = None) -> GreedyScores:
    """:class:`GreedyScores` of outputs x [N, T] with prompts ``canvases`` [N, T] (None: no prompt); ``searches``
    (a dict, filled here) keeps each canvas's k best across calls on the same world (several rows, one prompt set)."""
    w = exact_world(world)
    x = x.long().cpu()
    N, T = x.shape
    c = torch.full_like(x, w.mask_id) if canvases is None else canvases.long().cpu()
    if c.shape != x.shape:
        raise ValueError(f"canvases must have the shape of the outputs {tuple(x.shape)}, got {tuple(c.shape)}")
    revealed = c < w.mask_id
    if bool((revealed & (c != x)).any()):
        raise ValueError("an output disagrees with a revealed token of its prompt")
    joint = w.log_prob(x)
    evidence = w.log_evidence(c)
    mode = torch.empty(N, dtype=torch.float64)
    rank = torch.empty(N, dtype=torch.int64)
    distinct, which = torch.unique(c, dim=0, return_inverse=True)
    for j in range(distinct.shape[0]):
        rows = (which == j).nonzero().reshape(-1)
        key = (tuple(distinct[j].tolist()), int(rank_limit))
        if searches is None or key not in searches:
            best = w.k_best(distinct[j], rank_limit)[1]
            if searches is not None:
                searches[key] = best
        best = best if searches is None else searches[key]
        mode[rows] = float(best[0])
        lx = joint[rows]
        above = (best[None, :] > lx[:, None] + MODE_TOL).sum(1)
        listed = (lx >= best[-1] - MODE_TOL) | (best.numel() < rank_limit)
        rank[rows] = torch.where(listed, above + 1, torch.full_like(above, rank_limit + 1))
    free = (~revealed).sum(1)
    return GreedyScores(joint - evidence, mode - evidence, free, rank)
