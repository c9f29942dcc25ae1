"""Exact ground truths of an :class:`~dllm_lit.markov.hmm.HMMWorld` (stationary, so position-free).

* n-gram marginals (n <= 3):  p(x_0..x_{n-1}) = mu D_{x_0} A D_{x_1} ... A D_{x_{n-1}} 1, D_v = diag(B(., v)).
* dependence profile:  I(X_i; X_{i+d}) = sum_{v,w} J_d(v, w) log(J_d(v, w) / (p(v) p(w))),
  J_d = (mu o B)^T A^d B  (exact, d = 1..d_max).
* entropy rate H = lim H(X_t | X_{<t}): exact, sum_s mu(s) H(A(s, .) B-pushed), when every state emits one token
  and the state is a function of the past tokens (first-order and order-k worlds:
  H = sum_s mu(s) H(rows(s, .)));  otherwise a Monte Carlo estimate from exact samples,
  mean over sequences of -log p(x_t | x_{<t}) for t in the second half of long sequences, with its
  standard error (an estimate of H(X_t | X_{<t}) >= H, which decreases to H as t grows).

A finite-horizon world (``world.horizon = H``, e.g. a prompted task) is not stationary: its n-gram marginals and
J_d are the averages over the start positions t = 0..H - n (resp. H - 1 - d) of the position-t laws (mu replaced by
mu A^t), the laws the plug-in estimators pooling every position estimate; I(d) for d >= H is NaN (no pair).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from dllm_lit.markov.chain import ChainError

if TYPE_CHECKING:
    from dllm_lit.markov.hmm import HMMWorld

__all__ = ["ngram_marginals", "dependence_profile", "mutual_information", "entropy_rate", "EntropyRate"]


def ngram_marginals(world: HMMWorld, n: int) -> torch.Tensor:
    """Exact p(x_0, ..., x_{n-1}) as float64 [V] * n (n in 1..3)."""
    if n not in (1, 2, 3):
        raise ChainError(f"n must be 1, 2 or 3, got {n!r}")
    V, S = world.vocab_size, world.num_states
    starts = _start_laws(world, n - 1)
    out = torch.zeros((V,) * n, dtype=torch.float64)
    for a in starts:
        m = (a[:, None] * world.B).T.contiguous()  # [V, S]: a(s) B(s, x_0)
        for _ in range(n - 1):
            m = world.right(m)  # [V^j, S]
            m = (m[:, None, :] * world.B.T[None, :, :]).reshape(-1, S)  # [V^(j+1), S]
        out += m.sum(1).reshape((V,) * n)
    return out / len(starts)


def _start_laws(world: HMMWorld, span: int) -> list[torch.Tensor]:
    """The state laws mu A^t at the start positions of a window covering ``span`` more positions: [mu] for a
    stationary world, t = 0..H - 1 - span for a finite-horizon one (an error when the window is longer than H)."""
    if world.horizon is None:
        return [world.initial]
    if span >= world.horizon:
        raise ChainError(f"a window of {span + 1} tokens does not fit the world's horizon {world.horizon}")
    laws, a = [], world.initial[None]
    for _ in range(world.horizon - span):
        laws.append(a[0])
        a = world.right(a)
    return laws


def mutual_information(J: torch.Tensor) -> float:
    """I = sum J log(J / (J 1)(1^T J)) of a joint law J [V, V] (0 log 0 = 0), in nats."""
    p, q = J.sum(1), J.sum(0)
    denom = p[:, None] * q[None, :]
    pos = J > 0
    return float((J[pos] * (J[pos] / denom[pos]).log()).sum().clamp_min(0.0))


def dependence_profile(world: HMMWorld, max_distance: int = 64) -> torch.Tensor:
    """Exact I(X_i; X_{i+d}) for d = 1..max_distance, float64 [max_distance] (nats)."""
    if int(max_distance) < 1:
        raise ChainError(f"max_distance must be >= 1, got {max_distance!r}")
    out = torch.full((int(max_distance),), float("nan"), dtype=torch.float64)
    H = world.horizon
    starts = _start_laws(world, 0)
    lefts = [(a[:, None] * world.B).T.contiguous() for a in starts]  # [V, S] per start position
    for d in range(int(max_distance)):
        if H is not None and d + 1 >= H:
            break
        lefts = [world.right(left) for left in lefts[: None if H is None else H - 1 - d]]  # pushed d + 1 steps
        out[d] = mutual_information(sum(left @ world.B for left in lefts) / len(lefts))
    return out


class EntropyRate(float):
    """The entropy rate in nats per token; ``stderr`` is 0 when exact, else the Monte Carlo standard error."""

    exact: bool
    stderr: float

    def __new__(cls, value: float, exact: bool, stderr: float = 0.0) -> "EntropyRate":
        obj = super().__new__(cls, value)
        obj.exact, obj.stderr = exact, float(stderr)
        return obj


def _row_entropy(P: torch.Tensor) -> torch.Tensor:
    return -(P * P.clamp_min(1e-300).log()).sum(1)


def entropy_rate(world: HMMWorld, num_sequences: int = 256, length: int = 512, seed: int = 0) -> EntropyRate:
    """Exact entropy rate when the hidden state is a function of the past tokens (context worlds and one-hot
    first-order worlds), else the Monte Carlo estimate described in the module docstring."""
    if world.order is not None:
        return EntropyRate(float((world.initial * _row_entropy(world.rows)).sum()), exact=True)
    if world.num_states == world.vocab_size and bool((world.B == torch.eye(world.vocab_size, dtype=torch.float64)).all()):
        return EntropyRate(float((world.initial * _row_entropy(world.A)).sum()), exact=True)
    x = world.sample(num_sequences, length, seed=seed)
    half = length // 2
    per_seq = (world.log_prob(x[:, :half]) - world.log_prob(x)) / (length - half)  # -mean log p(x_t | x_<t), t >= half
    return EntropyRate(float(per_seq.mean()), exact=False, stderr=float(per_seq.std() / math.sqrt(num_sequences)))
