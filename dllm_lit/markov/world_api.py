"""The exact-world interface that conditional evaluation and the greedy scores read, for any world.

A world is exact when it answers, for canvases ``z`` [N, T] (a token id < V, or MASK = V where free):

==========================================  ===============================================================
``vocab_size``                              V
``log_prob(x)``                             log p(x) of complete sequences x [N, T], float64 [N]
``sample(n, T, seed=, start_index=)``       exact samples; sequence i depends only on (seed, start_index + i)
``posterior(z)``                            p(x_t = v | z) under absorbing evidence, float64 [N, T, V]
``log_evidence(z)``                         log p(the revealed tokens of z), float64 [N] (-inf: impossible)
``sample_given(z, seed, indices)``          exact samples of p(x | z), keyed by ``indices`` [N]
``k_best(z, k)``                            the k most likely x agreeing with one canvas z [T], with log p(x),
                                            non-increasing (equal values: any order)
``pair_rows(z, m, t, a)``                   p(x_t = a, x_{t+1} = v | z_m) over v for queries (m, t, a) [Q] at
                                            adjacent free positions, float64 [Q, V]
==========================================  ===============================================================

:class:`ExactWorld` derives the last four from ``log_prob`` and ``posterior`` (chain rule over the revealed
positions; left-to-right sampling from the posterior; enumeration of the free positions, at most
:data:`ENUMERATION_LIMIT` completions; p(x_t = a | z) p(x_{t+1} | z with x_t = a written)), so a new world (a
task world) implements three methods and overrides the others where it has something faster.
:class:`HMMWorldView` answers them exactly for an :class:`HMMWorld` (forward algorithm, forward filtering with
right messages, forward-backward pair laws, best-first max-product search:
:mod:`~dllm_lit.markov.hmm_conditional`, :mod:`~dllm_lit.markov.max_product`); :func:`exact_world` gives the view
of a :class:`MarkovChain` (as the HMM with S = V, B = I), of an :class:`HMMWorld`, or returns an
:class:`ExactWorld` unchanged.  Conditional log-probabilities follow: log p(x | z) = log p(x) - log p(z).
"""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod

import torch

from dllm_lit import rng
from dllm_lit.markov.chain import ChainError, MarkovChain, inverse_cdf
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.markov.hmm_conditional import CONDITIONAL_STEP, log_evidence, pair_rows, sample_given
from dllm_lit.markov.max_product import k_best

__all__ = ["ConditionedWorld", "ExactWorld", "HMMWorldView", "exact_world", "check_canvas", "check_pair_queries",
           "conditional_log_prob", "ENUMERATION_LIMIT"]

#: the most completions :meth:`ExactWorld.k_best` enumerates
ENUMERATION_LIMIT = 2**20


def check_canvas(canvas: torch.Tensor, vocab_size: int, seq_len: int | None = None, name: str = "prompt") -> torch.Tensor:
    """A canvas as int64 [N, T] (one [T] becomes [1, T]) with ids in [0, V] and at least one MASK per row, or a
    one-line error naming ``name``."""
    z = torch.as_tensor(canvas)
    if z.is_floating_point() or z.is_complex() or z.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids (MASK = V = {vocab_size} where free), got {z.dtype}")
    z = z.long().cpu()
    if z.dim() == 1:
        z = z[None]
    if z.dim() != 2 or z.shape[1] == 0:
        raise ValueError(f"{name} must have shape [T] or [N, T] with T >= 1, got {tuple(z.shape)}")
    if seq_len is not None and z.shape[1] != seq_len:
        raise ValueError(f"{name} has length {z.shape[1]}; the sequence length T is {seq_len}")
    if z.numel() and (int(z.min()) < 0 or int(z.max()) > vocab_size):
        bad = int(z[(z < 0) | (z > vocab_size)][0])
        raise ValueError(f"{name} holds token id {bad}, outside the vocabulary 0..{vocab_size - 1} (MASK = {vocab_size})")
    full = (z < vocab_size).all(1)
    if bool(full.any()):
        raise ValueError(f"{name} row {int(full.nonzero()[0])} reveals every position: nothing to fill")
    return z


def check_pair_queries(z: torch.Tensor, m: torch.Tensor, t: torch.Tensor, a: torch.Tensor,
                       mask_id: int) -> tuple[torch.Tensor, ...]:
    """Pair queries (m, t, a) of canvases z [M, T] as int64 CPU tensors, or a one-line error unless 0 <= a < V
    and positions t and t + 1 are free in z_m."""
    z, m, t, a = (torch.as_tensor(v).cpu().long().reshape(-1) if i else torch.as_tensor(v).cpu().long()
                  for i, v in enumerate((z, m, t, a)))
    if not (m.numel() == t.numel() == a.numel()):
        raise ValueError(f"pair queries need one m, t and a each, got {m.numel()}, {t.numel()}, {a.numel()}")
    if m.numel() == 0:
        return z, m, t, a
    if int(t.min()) < 0 or int(t.max()) + 1 >= z.shape[1] or int(a.min()) < 0 or int(a.max()) >= mask_id:
        raise ValueError(f"pair queries need 0 <= t < T - 1 = {z.shape[1] - 1} and tokens in [0, {mask_id})")
    if not bool(((z[m, t] == mask_id) & (z[m, t + 1] == mask_id)).all()):
        raise ValueError("pair queries must ask for two adjacent free positions (MASK at t and t + 1)")
    return z, m, t, a


class ExactWorld(ABC):
    """A world with an exact law (module docstring): subclasses give ``vocab_size``, :meth:`log_prob`,
    :meth:`sample` and :meth:`posterior`; the rest is derived and may be overridden."""

    vocab_size: int

    @property
    def mask_id(self) -> int:
        return int(self.vocab_size)

    @abstractmethod
    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """log p(x) for x [N, T]: float64 [N]."""

    @abstractmethod
    def sample(self, num_sequences: int, length: int, *, seed: int, start_index: int = 0) -> torch.Tensor:
        """Exact samples [N, T]; sequence i depends only on (seed, start_index + i)."""

    @abstractmethod
    def posterior(self, z: torch.Tensor) -> torch.Tensor:
        """p(x_t = v | z) for canvases z [N, T]: float64 [N, T, V]."""

    def log_evidence(self, z: torch.Tensor) -> torch.Tensor:
        """log p(revealed tokens of z) by the chain rule over the revealed positions, left to right."""
        z = z.cpu().long()
        out = torch.zeros(z.shape[0], dtype=torch.float64)
        for n in range(z.shape[0]):
            seen = torch.full_like(z[n], self.mask_id)
            for t in (z[n] < self.mask_id).nonzero().reshape(-1).tolist():
                out[n] += float(self.posterior(seen[None])[0, t, z[n, t]].log())
                seen[t] = z[n, t]
        return out

    def sample_given(self, z: torch.Tensor, seed: int, indices: torch.Tensor) -> torch.Tensor:
        """Exact samples of p(x | z): left to right, each free token from its posterior given the canvas so far."""
        x = z.cpu().long().clone()
        keys = rng.sequence_keys(seed, indices.cpu(), rng.Stream.CHAIN)
        u = rng.uniform(keys[:, None], CONDITIONAL_STEP, torch.arange(x.shape[1])[None, :], slot=0)
        for t in range(x.shape[1]):
            free = x[:, t] == self.mask_id
            if bool(free.any()):
                p = self.posterior(x[free])[:, t]
                x[free, t] = inverse_cdf(p.cumsum(1), u[free, t])
        return x

    def k_best(self, z: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k most likely completions of canvas z [T] by enumeration (at most :data:`ENUMERATION_LIMIT`)."""
        z = z.cpu().long().reshape(-1)
        free = (z == self.mask_id).nonzero().reshape(-1)
        count = self.vocab_size ** free.numel()
        if count > ENUMERATION_LIMIT:
            raise ChainError(f"{type(self).__name__} has no k_best of its own and {count} completions exceed the "
                             f"enumeration limit {ENUMERATION_LIMIT}")
        fills = torch.tensor(list(itertools.product(range(self.vocab_size), repeat=free.numel())), dtype=torch.long)
        x = z.expand(max(count, 1), -1).clone()
        if free.numel():
            x[:, free] = fills.view(count, -1)
        lp = self.log_prob(x)
        order = torch.sort(-lp, stable=True).indices[: int(k)]  # enumeration order is lexicographic: the tie rule
        keep = order[lp[order] > float("-inf")]
        return x[keep], lp[keep]

    def pair_rows(self, z: torch.Tensor, m: torch.Tensor, t: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """p(x_t = a, x_{t+1} = v | z_m) over v for each query (m, t, a) [Q]: p(x_t = a | z_m) times the posterior
        of t + 1 given z_m with a written at t (0 where x_t = a is impossible); float64 [Q, V]."""
        z, m, t, a = check_pair_queries(z, m, t, a, self.mask_id)
        first = self.posterior(z)[m, t, a]
        out = torch.zeros(m.numel(), self.vocab_size, dtype=torch.float64)
        ok = first > 0
        if bool(ok.any()):
            zq = z[m[ok]].clone()
            zq[torch.arange(zq.shape[0]), t[ok]] = a[ok]
            out[ok] = first[ok, None] * self.posterior(zq)[torch.arange(zq.shape[0]), t[ok] + 1]
        return out


class HMMWorldView(ExactWorld):
    """:class:`ExactWorld` of an :class:`HMMWorld` (exact, module docstring)."""

    def __init__(self, world: HMMWorld) -> None:
        self.world = world
        self.vocab_size = world.vocab_size

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return self.world.log_prob(x)

    def sample(self, num_sequences: int, length: int, *, seed: int, start_index: int = 0) -> torch.Tensor:
        return self.world.sample(num_sequences, length, seed=seed, start_index=start_index)

    def posterior(self, z: torch.Tensor) -> torch.Tensor:
        from dllm_lit.denoisers.hmm_posterior import hmm_posterior

        return hmm_posterior(self.world, z.cpu().long())

    def log_evidence(self, z: torch.Tensor) -> torch.Tensor:
        return log_evidence(self.world, z)

    def sample_given(self, z: torch.Tensor, seed: int, indices: torch.Tensor) -> torch.Tensor:
        return sample_given(self.world, z, seed, indices)

    def k_best(self, z: torch.Tensor, k: int, max_nodes: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return k_best(self.world, z, k, max_nodes)

    def pair_rows(self, z: torch.Tensor, m: torch.Tensor, t: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return pair_rows(self.world, *check_pair_queries(z, m, t, a, self.mask_id))


class ConditionedWorld(ExactWorld):
    """The law p(x_free | c) of the G free positions of a prompt canvas c [T], as an :class:`ExactWorld` over
    sequences of length G (canvas order): what a sampler continuing the prompt targets; exact laws of sampler rules
    (:mod:`dllm_lit.exact`) run on it."""

    def __init__(self, world, canvas: torch.Tensor) -> None:
        self.base = exact_world(world)
        self.vocab_size = self.base.vocab_size
        self.canvas = check_canvas(canvas, self.vocab_size)[0]
        self.free = (self.canvas == self.mask_id).nonzero().reshape(-1)

    def _full(self, x: torch.Tensor) -> torch.Tensor:
        full = self.canvas.expand(x.shape[0], -1).clone()
        full[:, self.free] = x.cpu().long()
        return full

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        return self.base.log_prob(self._full(x)) - self.base.log_evidence(self.canvas[None])

    def sample(self, num_sequences: int, length: int, *, seed: int, start_index: int = 0) -> torch.Tensor:
        if length != self.free.numel():
            raise ValueError(f"the prompt leaves {self.free.numel()} positions free, not {length}")
        idx = torch.arange(start_index, start_index + int(num_sequences))
        return self.base.sample_given(self.canvas.expand(idx.numel(), -1), seed, idx)[:, self.free]

    def posterior(self, z: torch.Tensor) -> torch.Tensor:
        return self.base.posterior(self._full(z))[:, self.free]


_VIEWS: dict[str, HMMWorldView] = {}


def exact_world(world) -> ExactWorld:
    """The :class:`ExactWorld` of a MarkovChain, an HMMWorld or an ExactWorld (returned as is)."""
    if isinstance(world, ExactWorld):
        return world
    if isinstance(world, MarkovChain):
        key = world.fingerprint
        if key not in _VIEWS:
            if len(_VIEWS) >= 8:
                _VIEWS.pop(next(iter(_VIEWS)))
            _VIEWS[key] = HMMWorldView(HMMWorld.from_chain(world))
        return _VIEWS[key]
    if isinstance(world, HMMWorld):
        return HMMWorldView(world)
    raise TypeError(f"world must be a MarkovChain, an HMMWorld or an ExactWorld, got {type(world).__name__}")


def conditional_log_prob(world, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """log p(x | z) = log p(x) - log p(z) for complete x [N, T] agreeing with canvases z [N, T] (float64 [N])."""
    w = exact_world(world)
    x, z = x.cpu().long(), z.cpu().long()
    revealed = z < w.mask_id
    if bool((revealed & (x != z)).any()):
        raise ValueError("x disagrees with a revealed token of its prompt")
    return w.log_prob(x) - w.log_evidence(z)
