"""The class structure of a chain's kernel: closed classes, transient states and the period.

A chain P' = (1 - eps) P_topK + eps 1 nu^T moves from i to j with positive probability when j is in
i's top-K list with P_topK(j | i) > 0, or when eps > 0 and nu(j) > 0.  Its powers converge to 1 pi^T
(what the oracle's certified depth relies on, :mod:`dllm_lit.denoisers.oracle_cache`) exactly when the
chain has one closed class, that class is aperiodic, and no state is transient (Perron-Frobenius);
otherwise the residual max |P'^d / pi - 1| never falls below any tolerance.

:func:`chain_structure` finds the structure by breadth-first searches over the K V edges (vectorised,
O(V K) per level; well under a second at V = 4096, K = 206):

* eps > 0: every state reaches supp(nu) in one step, so the states reachable from supp(nu) form the
  one closed class, aperiodic (a state j of supp(nu) returns to itself in one step with
  probability >= eps nu(j)); every other state is transient.
* eps = 0: from a state r, F(r) (states r reaches) is a closed class iff r is reachable from all of
  F(r); otherwise move to a state of F(r) that cannot return to r (F shrinks strictly).  The chain
  has one closed class C iff every state reaches C; the period of C is the gcd of
  level(u) + 1 - level(v) over its edges u -> v, with breadth-first levels from r.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dllm_lit.markov.chain import MarkovChain

__all__ = ["ChainStructure", "chain_structure", "graph_structure"]


@dataclass(frozen=True)
class ChainStructure:
    """What :func:`chain_structure` found; ``closed`` is the first closed class found, ``other_closed``
    a state of another closed class (None when the class is unique)."""

    vocab_size: int
    closed: np.ndarray
    transient: np.ndarray
    period: int
    other_closed: int | None = None  # period 0: not determined (a reducible chain)

    @property
    def reducible(self) -> bool:
        return self.other_closed is not None

    @property
    def ergodic(self) -> bool:
        """One closed class holding every state, aperiodic: P'^d -> 1 pi^T with pi > 0."""
        return not self.reducible and self.transient.size == 0 and self.period == 1

    def problems(self) -> str:
        """What stops the powers from converging, in words ('' for an ergodic chain)."""
        out = []
        if self.reducible:
            out.append(f"it is reducible: state {int(self.closed[0])} and state {self.other_closed} lie in "
                       "closed classes that never reach each other")
        if self.transient.size:
            out.append(f"{self.transient.size} of its {self.vocab_size} states are transient (never revisited, "
                       f"stationary probability 0: {_ids(self.transient)})")
        if self.period > 1:
            out.append(f"it is periodic with period {self.period}")
        return "; ".join(out)


def _ids(states: np.ndarray, shown: int = 5) -> str:
    head = ", ".join(str(int(s)) for s in states[:shown])
    return f"token ids {head}" + (f" and {states.size - shown} more" if states.size > shown else "")


def _edges(chain: "MarkovChain") -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of the top-K part's positive entries."""
    V, K = chain.nbr_idx.shape
    keep = (chain.nbr_prob > 0).numpy().ravel()
    src = np.repeat(np.arange(V), K)[keep]
    dst = chain.nbr_idx.numpy().ravel()[keep]
    return src, dst


def _reach(start: np.ndarray, src: np.ndarray, dst: np.ndarray, V: int) -> np.ndarray:
    """Bool [V]: the states reachable from the ``start`` mask (start included) along src -> dst."""
    seen = start.copy()
    frontier = start
    while frontier.any():
        nxt = np.zeros(V, dtype=bool)
        nxt[dst[frontier[src]]] = True
        frontier = nxt & ~seen
        seen |= frontier
    return seen


def _levels(r: int, src: np.ndarray, dst: np.ndarray, V: int) -> np.ndarray:
    """Breadth-first level of every state from r (-1 where unreachable)."""
    level = np.full(V, -1, dtype=np.int64)
    level[r] = 0
    frontier = np.zeros(V, dtype=bool)
    frontier[r] = True
    d = 0
    while frontier.any():
        d += 1
        nxt = np.zeros(V, dtype=bool)
        nxt[dst[frontier[src]]] = True
        frontier = nxt & (level < 0)
        level[frontier] = d
    return level


def _closed_class_from(r: int, src: np.ndarray, dst: np.ndarray, V: int) -> tuple[int, np.ndarray]:
    """(a state of a closed class reachable from r, that class as a bool mask)."""
    while True:
        start = np.zeros(V, dtype=bool)
        start[r] = True
        forward = _reach(start, src, dst, V)
        escape = np.flatnonzero(forward & ~_reach(start, dst, src, V))
        if escape.size == 0:
            return r, forward
        r = int(escape[0])


def chain_structure(chain: "MarkovChain") -> ChainStructure:
    """The closed class(es), transient states and period of ``chain`` (see module docstring)."""
    V = chain.vocab_size
    src, dst = _edges(chain)
    if chain.eps > 0:
        closed = _reach((chain.nu > 0).numpy(), src, dst, V)
        return ChainStructure(V, np.flatnonzero(closed), np.flatnonzero(~closed), 1)
    return graph_structure(src, dst, V)


def graph_structure(src: np.ndarray, dst: np.ndarray, V: int) -> ChainStructure:
    """The structure of the chain over states 0..V-1 moving along the edges src -> dst (the eps = 0 case of
    :func:`chain_structure`; any kernel, e.g. an HMM's hidden transition, given by its positive entries)."""
    r, closed = _closed_class_from(0, src, dst, V)
    reaches = _reach(closed, dst, src, V)  # states with a path into the closed class
    if not reaches.all():  # some state never reaches it: it reaches another closed class
        other, _ = _closed_class_from(int(np.flatnonzero(~reaches)[0]), src, dst, V)
        return ChainStructure(V, np.flatnonzero(closed), np.zeros(0, dtype=np.int64), 0, other)
    level = _levels(r, src, dst, V)
    inside = closed[src]
    # a closed class has a cycle, so some edge leaves the breadth-first layering and the gcd is positive
    period = int(np.gcd.reduce(np.abs(level[src[inside]] + 1 - level[dst[inside]])))
    return ChainStructure(V, np.flatnonzero(closed), np.flatnonzero(~closed), period)
