"""A hidden-Markov world: hidden states s_t with transition A [S, S], emissions B [S, V], initial law mu.

    p(x_{0:T-1}) = sum_{s_{0:T-1}} mu(s_0) B(s_0, x_0) prod_{t >= 1} A(s_{t-1}, s_t) B(s_t, x_t)

The first-order chain is the special case S = V, B = I (:meth:`HMMWorld.from_chain`); its runs keep the
fast oracle of :class:`~dllm_lit.markov.MarkovChain`.  ``mu`` must be invariant (mu A = mu), so every
position has the same token marginal ``stationary = mu B`` and n-gram marginals do not depend on the position.
A *finite-horizon* world (``horizon = H``: a prompted task, whose states carry their position) is the exception:
its sequences have exactly H tokens, ``mu`` is the law of the first state (not checked for invariance), and its
position-free summaries (``stationary``, the n-gram marginals) are averages over the H positions.

A is held in one of two forms, both behind :meth:`right` (m A) and :meth:`left` (A m^T, row-wise), BLAS products
for the computations that are not per sequence (the stationary law, enumerations), and behind :attr:`products`
(:mod:`~dllm_lit.markov.products`: index-order sums, each row a function of itself alone) for the per-sequence ones:

* dense: ``A`` float64 [S, S];
* context (an order-k chain over V tokens, S = V^k): state s = (y_1..y_k) in base V, the next state is
  (y_2..y_k, c) with probability ``rows[s, c]`` [S, V] and the state emits y_k.  A has V nonzeros per
  row; m A is one batched product over the k - 1 shared symbols (O(S V) per row of m).

Sampling is counter-based (``dllm_lit.rng``, Stream.CHAIN): position t uses uniform slot 0 for the state and
slot 1 for the token, so sequence n depends only on (seed, n).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from dllm_lit import rng
from dllm_lit.util.hashing import sha256_tensors
from dllm_lit.markov.chain import ChainError, MarkovChain, inverse_cdf, inverse_cdf_1d
from dllm_lit.markov.products import WorldProducts, normalised

__all__ = ["HMMWorld", "ROW_SUM_TOL"]

#: tolerance of row sums (A, rows, B) and of the initial law's invariance
ROW_SUM_TOL = 1e-6


def _stochastic(name: str, t: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(t).to(torch.float64).cpu()
    if t.dim() == 0 or 0 in t.shape:
        raise ChainError(f"{name} must be non-empty (at least one state and one token), got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all() or (t < 0).any():
        raise ChainError(f"{name} must hold finite entries >= 0")
    rs = t.sum(-1)
    bad = (rs - 1.0).abs() > ROW_SUM_TOL
    if bad.any():
        i = int(bad.reshape(-1).nonzero()[0])
        raise ChainError(f"row {i} of {name} sums to {rs.reshape(-1)[i].item():.9g}; every row must sum to 1 "
                         f"(tolerance {ROW_SUM_TOL})")
    return t / rs.unsqueeze(-1)


class HMMWorld:
    """A stationary HMM world (see module docstring).

    Args:
        emission: B, float64 [S, V], rows summing to one.
        transition: dense A [S, S] (rows summing to one); exclusive with ``context_rows``.
        context_rows: [S, V] next-symbol rows of an order-k context chain (S = V^k); ``emission`` is then
            implied (state s emits s mod V) and may be None.
        initial: mu [S] (None: the stationary law of A, which must then be unique); checked to be invariant
            unless ``horizon`` is set.
        metadata: free-form settings (source, order, rho, ...).
        horizon: None (stationary, any length) or H >= 1: every sequence has exactly H tokens and ``initial``
            (required) is the first state's law.
    """

    def __init__(self, emission: torch.Tensor | None = None, transition: torch.Tensor | None = None,
                 context_rows: torch.Tensor | None = None, initial: torch.Tensor | None = None,
                 metadata: dict[str, Any] | None = None, horizon: int | None = None) -> None:
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1):
            raise ChainError(f"horizon must be None or an int >= 1, got {horizon!r}")
        if horizon is not None and initial is None:
            raise ChainError("a finite-horizon world needs initial= (the law of its first state)")
        self.horizon: int | None = horizon
        if (transition is None) == (context_rows is None):
            raise ChainError("give exactly one of transition (dense A [S, S]) and context_rows (order-k rows [S, V])")
        self.order: int | None = None
        if context_rows is not None:
            rows = _stochastic("context_rows", context_rows)
            S, V = rows.shape
            k = round(math.log(S) / math.log(V)) if V > 1 else 1
            if V < 1 or V ** k != S:
                raise ChainError(f"context_rows must have V^k rows for V = {V} columns, got {S} rows")
            self.order, self.rows, self.A = k, rows.contiguous(), None
            emission = torch.nn.functional.one_hot(torch.arange(S) % V, V).to(torch.float64)
        else:
            A = _stochastic("transition", transition)
            if A.dim() != 2 or A.shape[0] != A.shape[1]:
                raise ChainError(f"transition must be a square [S, S] matrix, got shape {tuple(A.shape)}")
            self.A, self.rows = A.contiguous(), None
            if emission is None:
                raise ChainError("emission (B [S, V]) is required with a dense transition")
        B = _stochastic("emission", emission)
        if B.dim() != 2 or B.shape[0] != self.num_states_of(transition, context_rows):
            raise ChainError(f"emission must have shape [S, V] with S = {self.num_states_of(transition, context_rows)}, "
                             f"got {tuple(B.shape)}")
        self.B = B.contiguous()
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.stationary_tol = 1e-12
        if initial is None:
            self._check_unique_stationary()
        mu = self._solve_stationary() if initial is None else _stochastic("initial", torch.as_tensor(initial)[None])[0]
        if mu.numel() != self.num_states:
            raise ChainError(f"initial must have {self.num_states} entries, got {mu.numel()}")
        resid = (self.right(mu[None])[0] - mu).abs().sum().item() if horizon is None else 0.0
        if resid > 1e-8:
            raise ChainError(f"initial is not invariant under the transition (||mu A - mu||_1 = {resid:.3g} > 1e-8); "
                             "the world must be stationary")
        self.initial = mu
        self._fingerprint: str | None = None
        self._bigram_chain: MarkovChain | None = None
        self._products: WorldProducts | None = None

    @staticmethod
    def num_states_of(transition, context_rows) -> int:
        return int((transition if transition is not None else context_rows).shape[0])

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_chain(cls, chain: MarkovChain) -> "HMMWorld":
        """The first-order chain as an HMM: S = V, A = P', B = I, mu = pi."""
        V = chain.vocab_size
        return cls(emission=torch.eye(V, dtype=torch.float64), transition=chain.kernel, initial=chain.stationary,
                   metadata={"source": "first_order", "chain": chain.fingerprint})

    # ------------------------------------------------------------------ sizes and identity
    @property
    def num_states(self) -> int:
        return int(self.B.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.B.shape[1])

    @property
    def mask_id(self) -> int:
        return self.vocab_size

    @property
    def stationary(self) -> torch.Tensor:
        """Token marginal of every position, mu B (float64 [V]); a finite-horizon world: the mean over its H
        positions of mu A^t B."""
        if self.horizon is None:
            return self.initial @ self.B
        m, acc = self.initial[None], torch.zeros(self.vocab_size, dtype=torch.float64)
        for t in range(self.horizon):
            acc += (m @ self.B)[0]
            m = self.right(m)
        return acc / self.horizon

    def check_length(self, length: int) -> None:
        """Refuse a sequence length a finite-horizon world cannot produce (one line naming data.seq_len)."""
        if self.horizon is not None and int(length) != self.horizon:
            raise ChainError(f"data.seq_len must equal the world's horizon {self.horizon} (every sequence of this "
                             f"world has exactly {self.horizon} tokens), got {length}")

    @property
    def deterministic_emission(self) -> bool:
        """Whether every state emits one token (B one-hot): the entropy rate is then exact."""
        return bool(((self.B == 0) | (self.B == 1)).all())

    @property
    def fingerprint(self) -> str:
        """SHA-256 of (A or context rows, B, mu): keys run metadata and resume checks."""
        if self._fingerprint is None:
            trans = ("rows", self.rows) if self.rows is not None else ("A", self.A)
            extra = {"kind": "hmm"} if self.horizon is None else {"kind": "hmm", "horizon": self.horizon}
            self._fingerprint = sha256_tensors((trans, ("B", self.B), ("mu", self.initial)), extra=extra)
        return self._fingerprint

    def dense_transition(self) -> torch.Tensor:
        """A as a dense float64 [S, S] (built for context worlds; for small worlds and tests)."""
        if self.A is not None:
            return self.A
        S, V = self.rows.shape
        A = torch.zeros(S, S, dtype=torch.float64)
        nxt = (torch.arange(S) % (S // V))[:, None] * V + torch.arange(V)[None, :]
        A.scatter_(1, nxt, self.rows)
        return A

    # ------------------------------------------------------------------ operators
    @property
    def products(self) -> WorldProducts:
        """m A, (A m^T)^T and m B in float64 on the CPU with each row's bits independent of its batch: what every
        per-sequence path (log-probabilities, evidences, conditional samples, max-product, the oracle's posterior)
        uses; built once (a dense world holds A^T beside A)."""
        if self._products is None:
            self._products = WorldProducts(self)
        return self._products

    def right(self, m: torch.Tensor) -> torch.Tensor:
        """m A for m [n, S] (any float dtype and device) by BLAS: a row's rounding depends on n (per-sequence
        paths use :attr:`products`)."""
        if self.A is not None:
            return m @ self.A.to(device=m.device, dtype=m.dtype)
        S, V = self.rows.shape
        R = S // V
        P = self.rows.to(device=m.device, dtype=m.dtype).view(V, R, V)  # [a, rest, c]
        out = torch.bmm(m.view(-1, V, R).permute(2, 0, 1), P.permute(1, 0, 2))  # [rest, n, c]
        return out.permute(1, 0, 2).reshape(-1, S)

    def left(self, m: torch.Tensor) -> torch.Tensor:
        """(A m^T)^T for m [n, S]: out[b, s] = sum_s' A(s, s') m[b, s']."""
        if self.A is not None:
            return m @ self.A.to(device=m.device, dtype=m.dtype).T
        S, V = self.rows.shape
        R = S // V
        P = self.rows.to(device=m.device, dtype=m.dtype).view(V, R, V)  # [a, rest, c]
        out = torch.bmm(m.view(-1, R, V).permute(1, 0, 2), P.permute(1, 2, 0))  # [rest, n, a]
        return out.permute(1, 2, 0).reshape(-1, S)

    def _check_unique_stationary(self) -> None:
        """Without ``initial`` the world is the stationary law of A, which must be unique: A has one closed class
        (:func:`~dllm_lit.markov.structure.graph_structure` over its positive entries; transient states and a
        period are allowed).  An identity A (every state closed) is refused, naming two closed states."""
        from dllm_lit.markov.structure import graph_structure

        S = self.num_states
        if self.A is not None:
            src, dst = (i.numpy() for i in (self.A > 0).nonzero(as_tuple=True))
        else:  # context chain: state s moves to (s * V mod S) + c
            V = self.rows.shape[1]
            s, c = (i.numpy() for i in (self.rows > 0).nonzero(as_tuple=True))
            src, dst = s, (s * V) % S + c
        found = graph_structure(src, dst, S)
        if found.reducible:
            raise ChainError(f"transition has more than one stationary law (states {int(found.closed[0])} and "
                             f"{found.other_closed} lie in closed classes that never reach each other); pass "
                             "initial= (an invariant law) to choose one")

    def _solve_stationary(self) -> torch.Tensor:
        """The stationary law of A by power iteration on (I + A) / 2 (L1 residual 1e-12), from the uniform law."""
        S = self.num_states
        mu = torch.full((1, S), 1.0 / S, dtype=torch.float64)
        for it in range(1, 2_000_001):
            nxt = self.right(mu)
            if it % 16 == 0 and (nxt - mu).abs().sum().item() <= self.stationary_tol:
                return (nxt / nxt.sum())[0]
            mu = 0.5 * (mu + nxt)
        raise ChainError("the stationary law did not converge; pass initial= explicitly")

    # ------------------------------------------------------------------ probabilities
    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Exact log p(x) by the scaled forward algorithm, float64 [N] (probabilities floored at 1e-300); each
        sequence's value does not depend on its batch (:attr:`products`)."""
        if x.dim() != 2:
            raise ChainError(f"x must have shape [N, T], got {tuple(x.shape)}")
        if x.numel() and (x.min() < 0 or x.max() >= self.vocab_size):
            raise ChainError(f"x token ids must lie in [0, V={self.vocab_size})")
        self.check_length(x.shape[1])
        x = x.cpu().long()
        Bt, ops = self.B.T.contiguous(), self.products
        f, s, _ = normalised(self.initial[None] * Bt[x[:, 0]])
        lp = s[:, 0].clamp_min(1e-300).log()
        for t in range(1, x.shape[1]):
            f, s, _ = normalised(ops.right(f) * Bt[x[:, t]])
            lp = lp + s[:, 0].clamp_min(1e-300).log()
        return lp

    # ------------------------------------------------------------------ sampling
    def sample(self, num_sequences: int, length: int, generator: torch.Generator | None = None, *,
               seed: int | None = None, start_index: int = 0, device: torch.device | str | None = None,
               return_states: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Exact samples [N, T] (and the hidden states with ``return_states``): s_0 ~ mu, s_t ~ A(s_{t-1}, .),
        x_t ~ B(s_t, .), by inverse CDF on counter-based uniforms (see module docstring)."""
        if int(num_sequences) < 1 or int(length) < 1:
            raise ChainError(f"num_sequences and length must be >= 1, got {num_sequences} and {length}")
        self.check_length(length)
        if seed is None:
            seed = rng.seed_from_generator(generator)
        device = torch.device(device) if device is not None else torch.device("cpu")
        N, T = int(num_sequences), int(length)
        keys = rng.sequence_keys(seed, torch.arange(start_index, start_index + N, device=device), rng.Stream.CHAIN)
        pos = torch.arange(T, device=device)[None, :]
        u_s, u_x = rng.uniform(keys[:, None], 0, pos, slot=0), rng.uniform(keys[:, None], 0, pos, slot=1)
        if self.A is not None:
            trans_cdf = self.A.to(device).cumsum(1)
        else:
            trans_cdf = self.rows.to(device).cumsum(1)
            R = self.num_states // self.vocab_size
        emit_cdf = self.B.to(device).cumsum(1)
        states = torch.empty(N, T, dtype=torch.int64, device=device)
        states[:, 0] = inverse_cdf_1d(self.initial.to(device).cumsum(0), u_s[:, 0])
        for t in range(1, T):
            prev = states[:, t - 1]
            k = inverse_cdf(trans_cdf[prev], u_s[:, t])
            states[:, t] = k if self.A is not None else (prev % R) * self.vocab_size + k
        x = torch.empty_like(states)
        for t in range(T):  # one position at a time: no [N, T, V] table of emission rows
            x[:, t] = inverse_cdf(emit_cdf[states[:, t]], u_x[:, t])
        return (x, states) if return_states else x

    # ------------------------------------------------------------------ first-order projection
    @property
    def bigram_chain(self) -> MarkovChain:
        """The first-order chain with the world's exact bigram law: P(w | v) = p(x_{t+1} = w | x_t = v),
        pi = the token marginal.  Transition metrics of a non-first-order world compare against it.  A finite-horizon
        world's projection pools the positions: P from the mean bigram law, pi the mean token marginal
        (:attr:`stationary`), which that P need not leave invariant."""
        if self._bigram_chain is None:
            from dllm_lit.markov.hmm_exact import ngram_marginals

            J = ngram_marginals(self, 2)
            pi = J.sum(1)
            P = torch.where(pi[:, None] > 0, J / pi.clamp_min(1e-300)[:, None], torch.full_like(J, 1.0 / J.shape[1]))
            V = self.vocab_size
            meta = {"source": "hmm_bigram_projection", "world": self.fingerprint}
            chain = MarkovChain(torch.arange(V).expand(V, V).clone(), P / P.sum(1, keepdim=True),
                                stationary=pi / pi.sum() if self.horizon is None else None, metadata=meta)
            if self.horizon is not None:
                chain._stationary = self.stationary  # the pooled marginal (not invariant: no stationary law here)
            self._bigram_chain = chain
        return self._bigram_chain

    def __repr__(self) -> str:
        form = f"order={self.order}" if self.order is not None else "dense"
        if self.horizon is not None:
            form += f", horizon={self.horizon}"
        return f"HMMWorld(S={self.num_states}, V={self.vocab_size}, {form}, source={self.metadata.get('source', '?')!r})"
