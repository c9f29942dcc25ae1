r"""A finite-horizon world given by its support: every sequence of H tokens with an integer weight, as a minimal
unifilar HMM, so every HMM-world tool (the exact oracle, sampling, log p, the metrics) applies unchanged.

The law is p(x) = w(x) / W on the listed sequences (W the total weight; 0 elsewhere).  For a prefix x_{<=t} let
F(x_{<=t}) be the law of the rest x_{>t} given it (two prefixes share F exactly when their futures have the same
law).  The hidden state at position t is the pair (x_t, F(x_{<=t})):

    mu(x_0, F(x_0))                        = p(x_0)
    A((x_t, F), (x_{t+1}, F(x_{<=t+1})))   = p(x_{t+1} | x_{<=t}),     read from F alone
    B((x_t, F), v)                         = 1[v = x_t]

Given the tokens the state path is unique (unifilar), so the HMM's p(x) is the support law exactly, and the
HMM posterior under any masking is the exact conditional law of the support (the tests check it against
enumeration).  Futures are compared exactly: F is built from the last position back, each class keyed by its
children (token, reduced fraction p(v | prefix), child class), so equal laws share one state and no rounding
decides it.  States of the last position loop on themselves (never used: sequences have exactly H tokens).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dllm_lit.markov.chain import ChainError
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["SupportWorld", "support_world", "MAX_SUPPORT", "MAX_STATES"]

#: sequences of a support (the construction holds them as int64 arrays and walks their prefixes)
MAX_SUPPORT = 250_000
#: hidden states (A is dense: S^2 float64)
MAX_STATES = 4096


class SupportWorld(HMMWorld):
    """An :class:`HMMWorld` with ``horizon = H`` built by :func:`support_world`; ``successor[s, v]`` is the state
    after s when the next token is v (-1: probability 0) and ``first[v]`` the state of a first token v."""

    first: torch.Tensor
    successor: torch.Tensor

    @torch.no_grad()
    def in_support(self, x: torch.Tensor) -> torch.Tensor:
        """Whether each sequence of x [N, H] has positive probability: bool [N] (exact: follows the unique state
        path, no float is compared)."""
        if x.dim() != 2:
            raise ChainError(f"x must have shape [N, T], got {tuple(x.shape)}")
        self.check_length(x.shape[1])
        x = x.cpu().long()
        bad = (x < 0) | (x >= self.vocab_size)
        x = x.clamp(0, self.vocab_size - 1)
        s = self.first[x[:, 0]]
        ok = (s >= 0) & ~bad.any(1)
        for t in range(1, x.shape[1]):
            s = torch.where(ok, self.successor[s.clamp_min(0), x[:, t]], s)
            ok &= s >= 0
        return ok


def _reduced(num: int, den: int) -> tuple[int, int]:
    g = math.gcd(num, den)
    return num // g, den // g


def support_world(sequences: Any, weights: Any, vocab_size: int, metadata: dict[str, Any] | None = None) -> SupportWorld:
    """The minimal unifilar HMM of the law p(x) proportional to ``weights`` on ``sequences`` (see module docstring).

    Args:
        sequences: int [K, H] (distinct rows), tokens in [0, vocab_size).
        weights: positive ints [K] (the law is weights / sum).
        vocab_size: V.
        metadata: free-form settings of the world.
    """
    x = np.asarray(sequences, dtype=np.int64)
    w = np.asarray(weights, dtype=np.int64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1 or w.shape != (x.shape[0],):
        raise ChainError(f"sequences must be [K, H] with K, H >= 1 and weights [K], got {x.shape} and {w.shape}")
    if x.shape[0] > MAX_SUPPORT:
        raise ChainError(f"the support has {x.shape[0]} sequences, more than {MAX_SUPPORT}; use a smaller world")
    if (w <= 0).any() or x.min() < 0 or x.max() >= vocab_size:
        raise ChainError(f"weights must be positive and tokens in [0, {vocab_size})")
    K, H = x.shape
    order = np.lexsort(x.T[::-1])
    x, w = x[order], w[order]
    if K > 1 and (np.diff(x, axis=0) == 0).all(1).any():
        raise ChainError("sequences must be distinct")
    # prefix groups of each length t = 0..H: group[t][k] = id of x[k, :t] (rows are sorted, so a new group starts
    # wherever the prefix changes)
    group = [np.zeros(K, dtype=np.int64)]
    for t in range(1, H + 1):
        change = np.zeros(K, dtype=bool)
        change[1:] = (x[1:, :t] != x[:-1, :t]).any(1)
        group.append(np.cumsum(change))
    mass = [_group_sums(g, w) for g in group]
    # future classes, from the end: cls[t][g] = class of the law of x_{>=t} given prefix group g of length t
    cls: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * (H + 1)
    cls[H] = np.zeros(int(group[H][-1]) + 1, dtype=np.int64)
    children: list[dict[int, tuple]] = [dict() for _ in range(H)]  # class id at depth t -> its children
    for t in range(H - 1, -1, -1):
        parent, child = group[t], group[t + 1]
        starts = np.flatnonzero(np.r_[True, child[1:] != child[:-1]])  # first row of each child group
        sig: dict[int, list] = {}
        for r in starts:
            g, c = int(parent[r]), int(child[r])
            sig.setdefault(g, []).append((int(x[r, t]), *_reduced(int(mass[t + 1][c]), int(mass[t][g])),
                                          int(cls[t + 1][c])))
        ids: dict[tuple, int] = {}
        out = np.empty(len(sig), dtype=np.int64)
        for g, kids in sig.items():
            key = tuple(kids)
            out[g] = ids.setdefault(key, len(ids))
        cls[t] = out
        children[t] = {i: key for key, i in ids.items()}
    # states: position t, token v, future class F of the prefix ending at t (a class at depth t + 1)
    state_of: list[dict[tuple[int, int], int]] = []
    S = 0
    for t in range(H):
        here: dict[tuple[int, int], int] = {}
        for key in children[t].values():
            for v, _, _, f in key:
                if (v, f) not in here:
                    here[(v, f)] = S + len(here)
        state_of.append(here)
        S += len(here)
    if S > MAX_STATES:
        raise ChainError(f"the world needs {S} hidden states, more than {MAX_STATES}; use a smaller world")
    A = torch.zeros(S, S, dtype=torch.float64)
    successor = torch.full((S, vocab_size), -1, dtype=torch.int64)
    for t in range(H):
        for (v, f), s in state_of[t].items():
            if t + 1 == H:
                A[s, s] = 1.0
                continue
            for u, num, den, f2 in children[t + 1][f]:
                s2 = state_of[t + 1][(u, f2)]
                A[s, s2] = num / den
                successor[s, u] = s2
    mu = torch.zeros(S, dtype=torch.float64)
    first = torch.full((vocab_size,), -1, dtype=torch.int64)
    (root,) = children[0].values()
    for v, num, den, f in root:
        mu[state_of[0][(v, f)]] = num / den
        first[v] = state_of[0][(v, f)]
    B = torch.zeros(S, vocab_size, dtype=torch.float64)
    for t in range(H):
        for (v, _), s in state_of[t].items():
            B[s, v] = 1.0
    world = SupportWorld(emission=B, transition=A, initial=mu, metadata=metadata, horizon=H)
    world.first, world.successor = first, successor
    return world


def _group_sums(group: np.ndarray, w: np.ndarray) -> list[int]:
    """Exact integer sums of w over each group id (Python ints: no float, no overflow)."""
    out = [0] * (int(group[-1]) + 1)
    for g, v in zip(group.tolist(), w.tolist()):
        out[g] += v
    return out
