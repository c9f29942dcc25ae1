"""The ground-truth Markov chain P' = (1 - eps) P_topK + eps 1 nu^T (paper Sec. 3.1, Eq. 2; App. E).

A :class:`MarkovChain` stores the kernel as top-K neighbour lists ``nbr_idx[V, K]`` with
probabilities ``nbr_prob[V, K]`` (each row of the top-K part sums to one) plus the rank-one
teleport ``eps * 1 nu^T``.  The data law is

    p0(x_{0:T-1}) = pi(x_0) * prod_{t >= 1} P'(x_t | x_{t-1}),

with ``pi`` the stationary law of P' (the paper draws x_0 ~ pi, so every position is
marginally pi-distributed).  Construction never builds a dense V x V matrix; the dense P' is
available on demand through :attr:`MarkovChain.kernel`.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from dllm_lit import rng
from dllm_lit.markov import mixing
from dllm_lit.util.hashing import sha256_tensors
from dllm_lit.util.reductions import fixed_order_sum

__all__ = ["MarkovChain", "ChainError"]

_ROW_SUM_TOL = 1e-6


class ChainError(ValueError):
    """Invalid Markov-chain input (the message names the field and the allowed values)."""


def _as_float64(name: str, x: Any) -> torch.Tensor:
    t = torch.as_tensor(x)
    if not (t.is_floating_point() or t.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8)):
        raise ChainError(f"{name} must be a real-valued tensor, got dtype {t.dtype}")
    return t.to(torch.float64)


def _check_finite_nonneg(name: str, t: torch.Tensor) -> None:
    if not torch.isfinite(t).all():
        raise ChainError(f"{name} contains NaN or infinite entries; all entries must be finite and >= 0")
    if (t < 0).any():
        raise ChainError(f"{name} contains negative entries (min {t.min().item():.3g}); all entries must be >= 0")


def _check_distribution(name: str, t: torch.Tensor, size: int) -> torch.Tensor:
    t = _as_float64(name, t).flatten()
    if t.numel() != size:
        raise ChainError(f"{name} must have {size} entries (one per token of the vocabulary), got {t.numel()}")
    _check_finite_nonneg(name, t)
    s = t.sum().item()
    if abs(s - 1.0) > _ROW_SUM_TOL:
        raise ChainError(f"{name} must sum to 1 (tolerance {_ROW_SUM_TOL}), got {s:.9g}")
    return t / t.sum()


class MarkovChain:
    """A first-order Markov chain over ``V`` tokens stored as top-K lists plus a teleport.

    Args:
        nbr_idx: LongTensor[V, K], the K neighbours of each state (distinct within a row).
        nbr_prob: Tensor[V, K], P_topK(nbr_idx[i, k] | i); each row must sum to 1.
        eps: teleport weight in [0, 1).
        nu: teleport law over the V tokens (required when eps > 0; uniform if omitted).
        stationary: the stationary law of P' if already known (it is checked, not trusted).
        metadata: free-form settings recorded in saved artifacts (source, K rule, ...).
        stationary_tol: L1 tolerance of the stationary power iteration.
    """

    def __init__(
        self,
        nbr_idx: torch.Tensor,
        nbr_prob: torch.Tensor,
        eps: float = 0.0,
        nu: torch.Tensor | None = None,
        stationary: torch.Tensor | None = None,
        metadata: dict[str, Any] | None = None,
        stationary_tol: float = 1e-12,
    ) -> None:
        nbr_idx = torch.as_tensor(nbr_idx)
        if nbr_idx.dim() != 2:
            raise ChainError(f"nbr_idx must have shape [V, K], got {tuple(nbr_idx.shape)}")
        if nbr_idx.is_floating_point():
            raise ChainError("nbr_idx must hold integer token ids")
        nbr_idx = nbr_idx.to(torch.int64).cpu()
        V, K = nbr_idx.shape
        if V < 1 or K < 1:
            raise ChainError(f"nbr_idx must be non-empty, got shape {(V, K)}")
        if K > V:
            raise ChainError(f"top_k K={K} exceeds the vocabulary size V={V}; allowed 1 <= K <= V")
        if nbr_idx.min() < 0 or nbr_idx.max() >= V:
            raise ChainError(f"nbr_idx entries must lie in [0, V={V}), got range [{nbr_idx.min()}, {nbr_idx.max()}]")
        srt = nbr_idx.sort(dim=1).values
        if K > 1 and (srt[:, 1:] == srt[:, :-1]).any():
            raise ChainError("nbr_idx has a repeated neighbour within a row; neighbours must be distinct")
        nbr_prob = _as_float64("nbr_prob", nbr_prob).cpu()
        if nbr_prob.shape != nbr_idx.shape:
            raise ChainError(f"nbr_prob shape {tuple(nbr_prob.shape)} must equal nbr_idx shape {(V, K)}")
        _check_finite_nonneg("nbr_prob", nbr_prob)
        rs = nbr_prob.sum(1)
        bad = (rs - 1.0).abs() > _ROW_SUM_TOL
        if bad.any():
            i = int(bad.nonzero()[0])
            raise ChainError(f"row {i} of the transition kernel sums to {rs[i].item():.9g}; every row must sum to 1 (tolerance {_ROW_SUM_TOL})")
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and 0.0 <= eps < 1.0):
            raise ChainError(f"eps (teleport weight) must be a float in [0, 1), got {eps!r}")
        if nu is None:
            if eps > 0:
                raise ChainError("nu (teleport law) is required when eps > 0")
            nu = torch.full((V,), 1.0 / V, dtype=torch.float64)
        nu = _check_distribution("nu", nu, V).cpu()

        # Sort each row by probability (descending), ties by token id: a canonical form.
        order = torch.sort(nbr_idx, dim=1, stable=True).indices
        nbr_idx = nbr_idx.gather(1, order)
        p = nbr_prob.gather(1, order)
        order = torch.sort(p, dim=1, descending=True, stable=True).indices
        self.nbr_idx = nbr_idx.gather(1, order).contiguous()
        self.nbr_prob = (p.gather(1, order) / rs[:, None]).contiguous()
        self.eps = float(eps)
        self.nu = nu
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.stationary_tol = float(stationary_tol)
        self._kernel: torch.Tensor | None = None
        self._support: torch.Tensor | None = None
        self._topk_sparse_t: torch.Tensor | None = None
        self._stationary: torch.Tensor | None = None
        self._fingerprint: str | None = None
        if stationary is not None:
            pi = _check_distribution("stationary", stationary, V)
            resid = (self.apply_right(pi[None])[0] - pi).abs().sum().item()
            if resid > 1e-8:
                raise ChainError(f"stationary is not invariant under the kernel (||pi P' - pi||_1 = {resid:.3g} > 1e-8)")
            self._stationary = pi

    # ------------------------------------------------------------------ sizes
    @property
    def vocab_size(self) -> int:
        """Number of real tokens V."""
        return int(self.nbr_idx.shape[0])

    @property
    def mask_id(self) -> int:
        """Id of the absorbing MASK state, one past the vocabulary (== V)."""
        return self.vocab_size

    @property
    def top_k(self) -> int:
        """Neighbour-list length K."""
        return int(self.nbr_idx.shape[1])

    # ------------------------------------------------------------------ identity
    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of what defines the law: ``nbr_idx``, ``nbr_prob``, ``nu`` and ``eps``.

        Two chains with the same fingerprint have the same kernel P' (rows are in the canonical order
        set by the constructor); metadata, ``stationary_tol`` and the cached stationary law do not enter
        it.  It keys oracle caches, checkpoints and run metadata.  The hash is bit-exact: tensors that
        differ in the last bit (e.g. rows renormalised once more by another construction route) give
        another fingerprint.  Computed once: the tensors of a chain are not to be modified in place.
        """
        if self._fingerprint is None:
            self._fingerprint = sha256_tensors(
                (("nbr_idx", self.nbr_idx), ("nbr_prob", self.nbr_prob), ("nu", self.nu)), extra={"eps": self.eps}
            )
        return self._fingerprint

    # ------------------------------------------------------------------ kernels
    @property
    def kernel(self) -> torch.Tensor:
        """Dense P' as float64 [V, V] (built on first use and cached)."""
        if self._kernel is None:
            V = self.vocab_size
            P = torch.zeros(V, V, dtype=torch.float64)
            P.scatter_(1, self.nbr_idx, self.nbr_prob * (1.0 - self.eps))
            P += self.eps * self.nu[None, :]
            self._kernel = P
        return self._kernel

    def topk_support(self) -> torch.Tensor:
        """Bool [V, V]: True where j is in the top-K list S_i of state i (entries with positive P_topK)."""
        if self._support is None:
            V = self.vocab_size
            S = torch.zeros(V, V, dtype=torch.bool)
            S.scatter_(1, self.nbr_idx, self.nbr_prob > 0)
            self._support = S
        return self._support

    def _sparse_topk_transposed(self) -> torch.Tensor:
        if self._topk_sparse_t is None:
            V, K = self.nbr_idx.shape
            rows = torch.arange(V).repeat_interleave(K)
            with warnings.catch_warnings():
                # "sparse CSR support is in beta"; some torch releases also warn that invariant checks are off
                warnings.simplefilter("ignore", UserWarning)
                coo = torch.sparse_coo_tensor(torch.stack([self.nbr_idx.flatten(), rows]), self.nbr_prob.flatten(),
                                              (V, V), check_invariants=False).coalesce()
                self._topk_sparse_t = coo.to_sparse_csr()
        return self._topk_sparse_t

    def apply_right(self, M: torch.Tensor) -> torch.Tensor:
        """Return ``M @ P'`` for dense float64 M [n, V] in O(n V K): (1-eps) M P_topK + eps (M 1) nu^T."""
        M = M.to(torch.float64)
        if self.top_k == self.vocab_size:
            out = (1.0 - self.eps) * (M @ self._dense_topk())
        else:
            out = (1.0 - self.eps) * torch.sparse.mm(self._sparse_topk_transposed(), M.cpu().T).T.to(M.device)
        return out + self.eps * M.sum(1, keepdim=True) * self.nu.to(M.device)[None, :]

    def _dense_topk(self) -> torch.Tensor:
        V = self.vocab_size
        D = torch.zeros(V, V, dtype=torch.float64)
        D.scatter_(1, self.nbr_idx, self.nbr_prob)
        return D

    # ------------------------------------------------------------------ stationary law
    @property
    def stationary(self) -> torch.Tensor:
        """Stationary law pi (float64 [V]) with ||pi P' - pi||_1 <= stationary_tol.

        Power iteration on the lazy kernel (I + P')/2, which has the same invariant laws as P' and
        is aperiodic, so it converges for every chain; started from nu.  A chain on which the iteration is
        expected to need more than 10^7 iterations (:func:`~dllm_lit.markov.mixing.hopeless_power_iteration`,
        a nearly reducible chain, V <= 256) is solved directly instead (``mixing.stationary_by_solve``, the
        same tolerance checked).  Raises ChainError if the tolerance is not met within 10^6 iterations.
        """
        if self._stationary is None:
            pi = self.nu.clone() if self.eps > 0 else torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64)
            max_iter, check_every = 1_000_000, 16
            if mixing.hopeless_power_iteration(self, pi, max_iter):  # a nearly reducible chain: solve instead
                solved = mixing.stationary_by_solve(self)
                if solved is not None and fixed_order_sum((self._stationary_step(solved) - solved).abs()).item() \
                        <= self.stationary_tol:
                    self._stationary = solved / fixed_order_sum(solved)
                    return self._stationary
                max_iter = 0  # no law meets the tolerance: refuse at once
            for it in range(1, max_iter + 1):
                nxt = self._stationary_step(pi)
                if it % check_every == 0:
                    resid = fixed_order_sum((nxt - pi).abs()).item()
                    if resid <= self.stationary_tol:
                        pi = nxt
                        break
                pi = 0.5 * (pi + nxt)
            else:
                raise ChainError(
                    f"stationary law did not converge to tolerance {self.stationary_tol} within {max_iter} "
                    "power iterations; the chain is nearly reducible: pass stationary= explicitly"
                )
            self._stationary = pi / fixed_order_sum(pi)
        return self._stationary

    def _stationary_step(self, pi: torch.Tensor) -> torch.Tensor:
        """``pi P'`` for one float64 law [V], rounded the same way on every machine.

        Matrix products and ``torch.sum`` group their additions by the CPU's vector width and the BLAS
        build (AVX2, AVX-512, ARM), which moved pi, and with it ``unigram_l1``, by a few ulps between
        machines.  Here every product is elementwise, the scatter-add visits the pairs in row order
        and the teleport mass is a :func:`~dllm_lit.util.reductions.fixed_order_sum`.
        """
        flow = (pi[:, None] * self.nbr_prob).reshape(-1)
        out = torch.zeros_like(pi).index_add_(0, self.nbr_idx.reshape(-1), flow)
        return (1.0 - self.eps) * out + self.eps * fixed_order_sum(pi) * self.nu

    # ------------------------------------------------------------------ probabilities
    def transition_prob(self, prev: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        """P'(nxt | prev) elementwise (float64), via the dense kernel."""
        K = self.kernel
        return K[prev.cpu().long(), nxt.cpu().long()].to(prev.device)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Exact log p0(x) for sequences x [N, T]: log pi(x_0) + sum_t log P'(x_t | x_{t-1})."""
        self._check_tokens("x", x)
        x = x.cpu().long()
        lp = self.stationary.log()[x[:, 0]]
        if x.shape[1] > 1:
            lp = lp + self.kernel.log()[x[:, :-1], x[:, 1:]].sum(1)
        return lp

    def _check_tokens(self, name: str, x: torch.Tensor) -> None:
        if x.dim() != 2:
            raise ChainError(f"{name} must have shape [N, T], got {tuple(x.shape)}")
        if x.numel() and (x.min() < 0 or x.max() >= self.vocab_size):
            raise ChainError(f"{name} token ids must lie in [0, V={self.vocab_size})")

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        num_sequences: int,
        length: int,
        generator: torch.Generator | None = None,
        *,
        seed: int | None = None,
        start_index: int = 0,
        device: torch.device | str | None = None,
        topk_probs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Exact ancestral samples [N, T]: x_0 ~ pi, x_t ~ P'(. | x_{t-1}).

        Draws are counter-based (``dllm_lit.rng``): sequence ``start_index + n`` of a given
        ``seed`` is the same whatever ``num_sequences`` or batching.  Without ``seed`` one is
        drawn from ``generator`` (torch's global RNG if None).  Each step uses one uniform u:
        u < eps picks the teleport nu, otherwise the top-K row (inverse CDF, float64).
        ``topk_probs`` [V, K] replaces ``nbr_prob`` for the transitions (e.g. a sharpened kernel;
        x_0 is still drawn from pi).
        """
        if int(num_sequences) < 1:
            raise ChainError(f"num_sequences must be >= 1, got {num_sequences}")
        if int(length) < 1:
            raise ChainError(f"length must be >= 1, got {length}")
        if seed is None:
            seed = rng.seed_from_generator(generator)
        device = torch.device(device) if device is not None else torch.device("cpu")
        N, T = int(num_sequences), int(length)
        idx = torch.arange(start_index, start_index + N, device=device)
        keys = rng.sequence_keys(seed, idx, rng.Stream.CHAIN)
        u = rng.uniform(keys[:, None], 0, torch.arange(T, device=device)[None, :])  # [N, T]
        nbr_idx = self.nbr_idx.to(device)
        rows = self.nbr_prob if topk_probs is None else topk_probs
        if rows.shape != self.nbr_prob.shape:
            raise ChainError(f"topk_probs must have shape {tuple(self.nbr_prob.shape)}, got {tuple(rows.shape)}")
        row_cdf = rows.to(device=device, dtype=torch.float64).cumsum(1)
        # the teleport branch and x_0 do not depend on the previous token: draw them for all t at once
        tele = u < self.eps
        tok_tele = inverse_cdf_1d(self.nu.to(device).cumsum(0), (u / self.eps) if self.eps > 0 else u)
        u_row = ((u - self.eps) / (1.0 - self.eps)).clamp(0.0, 1.0)
        out = torch.empty(N, T, dtype=torch.int64, device=device)
        out[:, 0] = inverse_cdf_1d(self.stationary.to(device).cumsum(0), u[:, 0])
        for t in range(1, T):
            prev = out[:, t - 1]
            k = inverse_cdf(row_cdf[prev], u_row[:, t])
            out[:, t] = torch.where(tele[:, t], tok_tele[:, t], nbr_idx[prev, k])
        return out

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_kernel(cls, P: torch.Tensor, metadata: dict[str, Any] | None = None) -> "MarkovChain":
        """Chain from a dense row-stochastic matrix P [V, V] (K = V, eps = 0, pi = stationary of P)."""
        P = _as_float64("P", P)
        if P.dim() != 2 or P.shape[0] != P.shape[1]:
            raise ChainError(f"P must be a square [V, V] matrix, got shape {tuple(P.shape)}")
        _check_finite_nonneg("P", P)
        V = P.shape[0]
        idx = torch.arange(V).expand(V, V).clone()
        meta = {"source": "dense_kernel"}
        meta.update(metadata or {})
        return cls(idx, P, eps=0.0, metadata=meta)

    @classmethod
    def from_counts(
        cls,
        counts: torch.Tensor,
        top_k: int | None = None,
        target_mass: float | None = None,
        k_percentile: float | None = None,
        eps: float = 0.0,
        nu: torch.Tensor | None = None,
        pseudocount: float = 1e-8,
        metadata: dict[str, Any] | None = None,
        unigram: torch.Tensor | None = None,
    ) -> "MarkovChain":
        """The paper's construction from bigram counts C [V, V] (App. E.2-E.4).

        1. Empty rows (no outgoing counts) are replaced by the unigram counts (the paper's rule),
           then P_mle = row_normalise(C + pseudocount).
        2. K: ``top_k`` if given; else if ``target_mass`` or ``k_percentile`` is given, per row
           K*_i = min{k : top-k mass of P_mle(.|i) >= target_mass (default 0.99)} and
           K = floor(quantile_{k_percentile/100}(K*), linear interpolation) (default 90th);
           else K = V (no sparsification).
        3. Keep the top-K entries of each row (ties broken by lower token id), renormalise.
        4. P' = (1 - eps) P_topK + eps 1 nu^T, nu = empirical unigram by default.

        ``unigram`` (token counts or frequencies [V]) is the corpus unigram when known; otherwise it
        is estimated from the bigram table as the mean of its row and column sums (each token's
        count as predecessor and as successor).
        """
        C = _as_float64("counts", counts)
        if C.dim() != 2 or C.shape[0] != C.shape[1]:
            raise ChainError(f"counts must be a square [V, V] matrix, got shape {tuple(C.shape)}")
        _check_finite_nonneg("counts", C)
        V = C.shape[0]
        total = C.sum()
        if total <= 0:
            raise ChainError("counts is all zero; at least one bigram must be observed")
        if not (pseudocount >= 0 and math.isfinite(pseudocount)):
            raise ChainError(f"pseudocount must be a finite float >= 0, got {pseudocount!r}")
        if unigram is None:
            unigram = 0.5 * (C.sum(0) + C.sum(1))
        else:
            unigram = _as_float64("unigram", unigram).flatten()
            if unigram.numel() != V:
                raise ChainError(f"unigram must have {V} entries (one per token), got {unigram.numel()}")
            _check_finite_nonneg("unigram", unigram)
            if unigram.sum() <= 0:
                raise ChainError("unigram is all zero")
        empty = C.sum(1) == 0
        if empty.any():
            C = C.clone()
            C[empty] = unigram
        P = C + pseudocount
        P = P / P.sum(1, keepdim=True)
        if top_k is not None and (target_mass is not None or k_percentile is not None):
            raise ChainError("give either top_k or target_mass/k_percentile, not both")
        rule: dict[str, Any]
        if top_k is not None:
            if not (isinstance(top_k, int) and 1 <= top_k <= V):
                raise ChainError(f"top_k must be an integer in [1, V={V}], got {top_k!r}")
            K = top_k
            rule = {"k_rule": "fixed", "top_k": K}
        elif target_mass is not None or k_percentile is not None:
            tm = 0.99 if target_mass is None else float(target_mass)
            kp = 90.0 if k_percentile is None else float(k_percentile)
            if not 0.0 < tm <= 1.0:
                raise ChainError(f"target_mass must lie in (0, 1], got {tm}")
            if not 0.0 <= kp <= 100.0:
                raise ChainError(f"k_percentile must lie in [0, 100], got {kp}")
            srt = P.sort(dim=1, descending=True).values.cumsum(1)
            k_star = (srt < tm - 1e-12).sum(1) + 1
            k_star = k_star.clamp(max=V)
            K = int(math.floor(torch.quantile(k_star.to(torch.float64), kp / 100.0, interpolation="linear").item()))
            K = max(1, min(K, V))
            rule = {"k_rule": "mass_percentile", "target_mass": tm, "k_percentile": kp, "top_k": K}
        else:
            K = V
            rule = {"k_rule": "full", "top_k": V}
        # top-K by probability, ties -> lower token id (stable sort on index-ordered rows)
        order = torch.sort(P, dim=1, descending=True, stable=True).indices[:, :K]
        prob = P.gather(1, order)
        prob = prob / prob.sum(1, keepdim=True)
        if nu is None:
            nu = unigram / unigram.sum()
        meta = {"source": "counts", "pseudocount": pseudocount, "eps": eps, "num_bigrams": float(total), **rule}
        meta.update(metadata or {})
        return cls(order, prob, eps=eps, nu=nu, metadata=meta)

    def __repr__(self) -> str:
        return f"MarkovChain(V={self.vocab_size}, K={self.top_k}, eps={self.eps:g}, source={self.metadata.get('source', '?')!r})"


def inverse_cdf_1d(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF of one distribution (cdf [V]) at many uniforms (any shape)."""
    k = torch.searchsorted(cdf, (u.to(cdf.dtype) * cdf[-1]).contiguous(), right=True)
    return k.clamp_(max=cdf.shape[0] - 1)


def inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index k with cdf[k-1] <= u * total < cdf[k] per row (float64; total = cdf[..., -1])."""
    target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)
    k = torch.searchsorted(cdf.contiguous(), target, right=True).squeeze(-1)
    return k.clamp_(max=cdf.shape[-1] - 1)
