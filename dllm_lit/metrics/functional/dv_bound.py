r"""A certified lower bound on the per-token sequence KL: Donsker-Varadhan with bigram features.

For any function F of a length-T sequence and any two laws q (the sampler) and p (the chain),

    KL(q || p) >= E_q[F] - log E_p[e^F]                         (Donsker & Varadhan 1975)

with equality at F = log dq/dp.  Take F additive over the sequence,

    F(x) = g(x_0) + sum_{t=1}^{T-1} f(x_{t-1}, x_t),

then, p being the chain (x_0 ~ pi, x_t ~ P(. | x_{t-1})), the normaliser is a transfer-matrix product,

    E_p[e^F] = (pi o e^g)^T (P o e^f)^{T-1} 1,

computed exactly (:func:`log_partition`, in log space: the vector is renormalised at each step and
the log norms summed).  ``P o e^f`` is never built: for both feature families below it is a sparse
matrix on the top-K lists and the observed pairs plus a rank-one term (P = (1 - eps) P_topK +
eps 1 nu^T), so a step costs O(V K + #pairs) (:class:`Transfer`).

**The features.**  Two families, both additive over bigrams:

* *tilts* of the chain's own law (:class:`TiltFeatures`, a fixed grid :data:`TILTS`, nothing
  fitted): F = theta log p(x) + gamma sum_t log pi(x_t), so A_ij = P_ij^{1+theta} pi_j^gamma (rows
  sharpened for theta > 0, flattened for theta < 0; theta = -gamma a geometric mixture with pi^T,
  the law of decoding every position from its marginal in one step);
* *smoothed log-ratios* (:func:`fit_features`), fitted on one half of the sequences: with counts
  c_ij (n_i = sum_j c_ij) and first-token counts m_x over N_fit sequences, a Dirichlet(alpha P(. | i))
  posterior mean of the kernel, shrunk towards F = 0 by lambda in (0, 1]:

      f_ij = lambda log[(c_ij + alpha P_ij) / ((n_i + alpha) P_ij)],
      g_x  = lambda log[(m_x + alpha pi_x) / ((N_fit + alpha) pi_x)]

  (an unvisited state gets f = 0).  At lambda = 1 the smoothed kernel is stochastic and
  E_p[e^F] = 1; at lambda < 1 the normaliser is <= 1 (Hoelder).  A pair with P_ij = 0 adds nothing
  to E_p[e^F] whatever f_ij is; its f is capped at lambda * 69 nats (-log 1e-30, as ``nll``).

**Cross-fitting.**  The sequences (in index order) are split into halves A (even positions) and B
(odd).  On A, each tilt is scored by its bound on A, each candidate (alpha, lambda) of
:data:`CANDIDATES` by the same bound fitted on one half of A and evaluated on the other (both ways,
averaged); the best of all (refitted on all of A if a log-ratio) is F_A, and its bound L_A = mean_B(F_A) - log E_p[e^{F_A}] is evaluated on B, which took no part
in choosing F_A; F = 0 (the bound 0) wins when no candidate scores above 0.  Symmetrically L_B.
Given A, L_A is the mean of |B| independent terms whose expectation is a valid lower bound, so
``seq_kl_lower = (L_A + L_B) / (2 T)`` is an unbiased estimate of a lower bound on KL(q || p) / T,
with no plug-in bias.  Its one-sided lower confidence bound at level c is

    (L_A + L_B) / (2 T) - t_{c, n - 1} (se_A + se_B) / (2 T),

se the standard errors of the two means and n the smaller half: sd(X + Y) <= sd(X) + sd(Y) whatever
the dependence between the two halves' estimates, so combining them this way is conservative.
"""
from __future__ import annotations

import math
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch
from scipy.stats import t as student_t

from dllm_lit.markov.chain import MarkovChain

__all__ = ["CANDIDATES", "DVBound", "FEATURE_CAP", "TILTS", "BigramFeatures", "TiltFeatures", "Transfer", "dv_lower_bound",
           "fit_features", "log_partition", "pair_counts", "pair_positions"]

#: the (alpha, lambda) candidates scored on the fitting half (alpha: prior weight; lambda: shrinkage)
CANDIDATES: tuple[tuple[float, float], ...] = tuple((a, lam) for a in (1.0, 4.0, 16.0, 64.0) for lam in (0.5, 1.0))

#: the tilts (theta, gamma) of :class:`TiltFeatures` scored on the fitting half: sharper or flatter
#: rows, and geometric mixtures with one-step decoding (theta = -gamma)
TILTS: tuple[tuple[float, float], ...] = \
    tuple((th, 0.0) for th in (-0.5, -0.3, -0.15, -0.05, -0.02, 0.02, 0.05, 0.15, 0.3, 0.6, 1.0)) \
    + tuple((-g, g) for g in (0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1.0))

#: |f| and |g| are capped at lambda times this (nats): -log 1e-30, the probability floor of ``nll``
FEATURE_CAP = 69.0

#: BigramFeatures.values gathers from a dense V x V table up to this many entries (else a sorted search)
_DENSE_TABLE = 1 << 20

#: log_partition multiplies dense [n, V, V] transfer matrices when n V^2 is at most this
_DENSE_TRANSFER = 1 << 22

#: the power iteration of the normaliser stops early once the renormalised vector is a fixed point to this L1 tolerance
_FIXED_POINT_TOL = 1e-14


@dataclass(frozen=True)
class Transfer:
    """The transfer matrix A = P o e^f of some features as ``A = S + a b^T`` with S sparse (entries
    ``val`` at ``(src, dst)``), and the start weights ``w = pi o e^g``: E_p[e^F] = w^T A^{T-1} 1."""

    src: torch.Tensor
    dst: torch.Tensor
    val: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    start: torch.Tensor


def _topk_entries(chain: MarkovChain) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(i, j, P_topK(j | i)) of the top-K lists, flattened."""
    V, K = chain.nbr_idx.shape
    return torch.arange(V).repeat_interleave(K), chain.nbr_idx.reshape(-1), chain.nbr_prob.reshape(-1)


@dataclass(frozen=True)
class BigramFeatures:
    """F(x) = g(x_0) + sum_t f(x_{t-1}, x_t) with f given on sorted pair codes i * V + j and a per-state
    constant elsewhere: ``pairs`` int64 [U], ``pair_f`` float64 [U], ``row_const`` float64 [V],
    ``first`` float64 [V] (g)."""

    pairs: torch.Tensor
    pair_f: torch.Tensor
    row_const: torch.Tensor
    first: torch.Tensor

    def values(self, codes: torch.Tensor, vocab_size: int,
               where: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """F of each sequence from its transition codes [n, T - 1]: float64 [n].  ``where``: the codes'
        :func:`pair_positions` in ``self.pairs``, when known (features fitted on the same counts share it)."""
        flat = codes.reshape(-1)
        if vocab_size * vocab_size <= _DENSE_TABLE:  # a dense table of f, then one gather
            table = self.row_const[:, None].expand(vocab_size, vocab_size).reshape(-1).clone()
            table[self.pairs] = self.pair_f
            f = table[flat]
        else:
            f = self.row_const[flat // vocab_size]
            if self.pairs.numel():
                pos, hit = where if where is not None else pair_positions(self.pairs, flat)
                f = torch.where(hit, self.pair_f[pos], f)
        return self.first[codes[:, 0] // vocab_size] + f.view(codes.shape).sum(1)

    def transfer(self, chain: MarkovChain) -> Transfer:
        """P o e^f = diag(e^c) P + sum_observed P_ij (e^{f_ij} - e^{c_i}) e_i e_j^T, P = (1 - eps) P_topK + eps 1 nu^T."""
        _, r = self.split_transfer(chain)
        ti, tj, tp = _topk_entries(chain)
        top = (1.0 - chain.eps) * tp * self.row_const.exp()[ti]
        return Transfer(torch.cat([ti, r.src]), torch.cat([tj, r.dst]), torch.cat([top, r.val]), r.a, r.b, r.start)

    def split_transfer(self, chain: MarkovChain) -> tuple[torch.Tensor, Transfer]:
        """:meth:`transfer` as ``(w, R)``: S = diag(w) P_topK + R_sparse with w = (1 - eps) e^c and R only the
        observed-pair corrections, so that every feature of a call multiplies by the same P_topK."""
        V = chain.vocab_size
        scale = self.row_const.exp()
        i, j = self.pairs // V, self.pairs % V
        P = chain.kernel[i, j]
        corr = torch.where(P > 0, (P.clamp_min(1e-300).log() + self.pair_f).exp(), torch.zeros_like(P)) - P * scale[i]
        return (1.0 - chain.eps) * scale, Transfer(i, j, corr, chain.eps * scale, chain.nu,
                                                    chain.stationary * self.first.exp())


@dataclass(frozen=True)
class TiltFeatures:
    """F(x) = theta log p(x) + gamma sum_t log pi(x_t) (logs floored at 1e-30): tilts of the chain's
    law towards sharper (theta > 0) or flatter (theta < 0) rows, and (theta = -gamma) geometric
    mixtures of it with pi^T, the law of one-step decoding from the marginals."""

    theta: float
    gamma: float = 0.0

    @staticmethod
    def statistics(codes: torch.Tensor, chain: MarkovChain) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p(x), sum_t log pi(x_t)) of each sequence: F = theta * first + gamma * second."""
        V = chain.vocab_size
        flat = codes.reshape(-1)
        log_pi = chain.stationary.clamp_min(1e-30).log()
        head = log_pi[codes[:, 0] // V]
        lp = head + chain.kernel.reshape(-1)[flat].clamp_min(1e-30).log().view(codes.shape).sum(1)  # log of the gathered
        return lp, head + log_pi[flat % V].view(codes.shape).sum(1)

    def values(self, codes: torch.Tensor, chain: MarkovChain,
               statistics: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        lp, lpi = statistics if statistics is not None else self.statistics(codes, chain)
        return self.theta * lp + self.gamma * lpi

    def transfer(self, chain: MarkovChain) -> Transfer:
        """A_ij = P_ij^{1+theta} pi_j^gamma, start pi^{1+theta+gamma}: outside the top-K lists P_ij = eps nu_j,
        so that part of A is rank one."""
        e = 1.0 + self.theta
        pw = lambda x: torch.where(x > 0, x.clamp_min(1e-300).pow(e), torch.zeros_like(x))  # noqa: E731
        ti, tj, tp = _topk_entries(chain)
        pi = chain.stationary
        col = pi.clamp_min(1e-30).pow(self.gamma) if self.gamma else torch.ones_like(pi)
        val = (pw((1.0 - chain.eps) * tp + chain.eps * chain.nu[tj]) - pw(chain.eps * chain.nu[tj])) * col[tj]
        a = torch.full_like(pi, chain.eps ** e if chain.eps > 0 else 0.0)
        return Transfer(ti, tj, val, a, pw(chain.nu) * col, pw(pi) * col)


def pair_positions(pairs: torch.Tensor, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos, hit): where each code of ``flat`` would sit in the ascending ``pairs`` (clamped to its last entry) and
    whether it is there (``pairs[pos] == flat``); ``pairs`` non-empty."""
    pos = torch.searchsorted(pairs, flat).clamp(max=pairs.numel() - 1)
    return pos, pairs[pos] == flat


def pair_counts(codes: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(distinct pair codes ascending, their counts as float64) of codes [n, T - 1]."""
    flat = codes.reshape(-1)
    if vocab_size * vocab_size <= _DENSE_TABLE:
        counts = torch.bincount(flat, minlength=vocab_size * vocab_size)
        pairs = counts.nonzero().squeeze(1)
        return pairs, counts[pairs].to(torch.float64)
    pairs, c = torch.unique(flat, return_counts=True)
    return pairs, c.to(torch.float64)


def fit_features(codes: torch.Tensor, chain: MarkovChain, alpha: float, lam: float,
                 counts: tuple[torch.Tensor, torch.Tensor] | None = None) -> BigramFeatures:
    """The smoothed, shrunk log-ratio features of the module docstring from codes [n, T - 1]
    (``counts``: their :func:`pair_counts`, if already known)."""
    V = chain.vocab_size
    pairs, c = counts if counts is not None else pair_counts(codes, V)
    i, j = pairs // V, pairs % V
    n_row = torch.zeros(V, dtype=torch.float64).index_add_(0, i, c)
    P = chain.kernel[i, j]
    cap = lam * FEATURE_CAP
    pair_f = (lam * ((c + alpha * P) / (n_row[i] + alpha)).log() - lam * P.clamp_min(1e-30).log()).clamp(-cap, cap)
    row_const = torch.where(n_row > 0, lam * math.log(alpha) - lam * (n_row + alpha).log(), torch.zeros_like(n_row))
    pi = chain.stationary
    m = torch.bincount(codes[:, 0] // V, minlength=V).to(torch.float64)
    first = lam * ((m + alpha * pi) / (codes.shape[0] + alpha)).log() - lam * pi.clamp_min(1e-30).log()
    return BigramFeatures(pairs, pair_f, row_const.clamp(-cap, cap), first.clamp(-cap, cap))


def _block_csr_transpose(tr: list[Transfer], V: int) -> torch.Tensor:
    """S_k^T of every transfer as one block-diagonal CSR matrix [n V, n V] (block k: rows dst, columns src, entries
    at one (dst, src) summed), the matrix ``sparse_coo_tensor(...).coalesce().to_sparse_csr()`` gives, with equal
    column order and values, built without sorting the n (V K + U) entries together: the features of one run share
    a few entry patterns (the top-K lists, plus one fold's observed pairs), so each distinct pattern is sorted once
    (``torch.unique``) and every block only sums its values into that pattern's slots (``index_add_``, in entry
    order, as ``coalesce``).  At V = 4096, K = 206, 34 features (28.7M entries), on a loaded 2-core CPU: 7.2 s of CPU
    -> 1.0 s to build; a product 0.08 -> 0.04 s."""
    patterns: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (keys, inverse, crow, col)
    crows, cols, vals = [], [], []
    offset = 0
    for k, t in enumerate(tr):
        keys = t.dst * V + t.src
        hit = next((pat for pat in patterns if pat[0].shape == keys.shape and torch.equal(pat[0], keys)), None)
        if hit is None:
            uniq, inv = torch.unique(keys, sorted=True, return_inverse=True)
            crow = torch.zeros(V + 1, dtype=torch.long)
            crow[1:] = torch.bincount(uniq // V, minlength=V).cumsum(0)
            hit = (keys, inv, crow, uniq % V)
            patterns.append(hit)
        _, inv, crow, col = hit
        crows.append(crow[:-1] + offset if k < len(tr) - 1 else crow + offset)
        cols.append(col + k * V)
        vals.append(torch.zeros(col.numel(), dtype=t.val.dtype).index_add_(0, inv, t.val))
        offset += col.numel()
    n = len(tr)
    # int32 indices where they fit: MKL's own index type, which torch otherwise converts to on every product (the
    # same MKL routine on the same numbers either way, so the same float64 sums; half the CPU time a product)
    itype = torch.int32 if max(n * V, offset) < 2**31 else torch.long
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(torch.cat(crows).to(itype), torch.cat(cols).to(itype), torch.cat(vals),
                                       (n * V, n * V))


class _PowerIteration:
    """The log-space power iteration of :func:`log_partition` for several features, one step at a time, each step
    recorded: ``record(t)`` is (log_z, log s, converged) after t - 1 products, float64 [n], float64 [n], bool [n]
    (t = 1: the start weights, log s and converged unused).  Every operation acts on each feature's row alone (a
    block-diagonal CSR product, row sums), so with the sparse product a feature's record does not depend on which other
    features share the batch; ``dense`` picks the product as for the whole :func:`log_partition` call."""

    def __init__(self, chain: MarkovChain, tr: list[Transfer], dense: bool, shared: torch.Tensor | None = None) -> None:
        V, n = chain.vocab_size, len(tr)
        self.a, self.b = torch.stack([t.a for t in tr]), torch.stack([t.b for t in tr])
        self.dense = self.sparse_t = None
        #: ``shared`` [n, V]: S_k = diag(shared_k) P_topK + S_k (sparse path): one product with P_topK^T for all k
        self.shared, self.kernel_t = shared, None if shared is None else _topk_csr_transpose(chain)
        if dense:  # small chains: the n matrices A themselves, one batched product a step
            src = torch.cat([k * V + t.src for k, t in enumerate(tr)])
            dst = torch.cat([k * V + t.dst for k, t in enumerate(tr)])
            val = torch.cat([t.val for t in tr])
            self.dense = torch.zeros(n * V * V, dtype=torch.float64).index_put_(
                ((src // V) * V * V + (src % V) * V + dst % V,), val, accumulate=True).view(n, V, V)
            self.dense = self.dense + self.a[:, :, None] * self.b[:, None, :]
        else:  # S^T as one block-diagonal CSR matrix: a step is one sparse product plus the rank-one terms
            self.sparse_t = _block_csr_transpose(tr, V)
        v = torch.stack([t.start for t in tr])
        s = v.sum(1, keepdim=True)
        self.v, self.shape = v / s, (n, V)
        self.records = [(s.log().squeeze(1), None, None)]
        self.lock = threading.Lock()

    def _advance(self) -> None:
        v, (log_z, _, _) = self.v, self.records[-1]
        if self.dense is not None:
            nxt = torch.bmm(v[:, None, :], self.dense).squeeze(1).clamp_min(0.0)
        else:
            nxt = torch.sparse.mm(self.sparse_t, v.reshape(-1, 1)).view(self.shape)
            if self.shared is not None:
                nxt = nxt + torch.sparse.mm(self.kernel_t, (v * self.shared).T.contiguous()).T
            nxt = (nxt + (v * self.a).sum(1, keepdim=True) * self.b).clamp_min(0.0)
        s = nxt.sum(1, keepdim=True)
        nxt = nxt / s
        slog = s.log().squeeze(1)
        self.records.append((log_z + slog, slog, (nxt - v).abs().sum(1) <= _FIXED_POINT_TOL))
        self.v = nxt

    def record(self, t: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        with self.lock:
            while len(self.records) < t:
                self._advance()
            return self.records[t - 1]


#: the tilts' power iterations by (chain, T, dense product): they depend on nothing else, so every row of a grid
#: (and both halves of its bound) reuse one; the few most recent kept (a V = 4096 entry holds ~0.2 GB)
_TILT_CACHE: OrderedDict[tuple[int, int, bool], tuple[weakref.ref, _PowerIteration]] = OrderedDict()
_TILT_CACHE_SIZE = 2
_TILT_CACHE_LOCK = threading.Lock()


def _tilt_iteration(chain: MarkovChain, T: int, dense: bool) -> _PowerIteration:
    """The recorded power iteration of the :data:`TILTS` grid on ``chain``, shared by every call with the same key."""
    key = (id(chain), T, dense)
    with _TILT_CACHE_LOCK:
        hit = _TILT_CACHE.get(key)
        if hit is not None and hit[0]() is chain:
            _TILT_CACHE.move_to_end(key)
            return hit[1]
        it = _PowerIteration(chain, [TiltFeatures(th, g).transfer(chain) for th, g in TILTS], dense)
        _TILT_CACHE[key] = (weakref.ref(chain), it)
        while len(_TILT_CACHE) > _TILT_CACHE_SIZE:
            _TILT_CACHE.popitem(last=False)
        return it


_KERNEL_CACHE: dict[int, tuple[weakref.ref, torch.Tensor]] = {}


def _topk_csr_transpose(chain: MarkovChain) -> torch.Tensor:
    """P_topK^T [V, V] as CSR (int32 indices), one per chain (the last one kept)."""
    hit = _KERNEL_CACHE.get(id(chain))
    if hit is not None and hit[0]() is chain:
        return hit[1]
    ti, tj, tp = _topk_entries(chain)
    kt = _block_csr_transpose([Transfer(ti, tj, tp, tp[:0], tp[:0], tp[:0])], chain.vocab_size)
    _KERNEL_CACHE.clear()
    _KERNEL_CACHE[id(chain)] = (weakref.ref(chain), kt)
    return kt


def log_partition(chain: MarkovChain, features: list, T: int) -> torch.Tensor:
    """log E_p[e^F] for each of several features at once, log w^T A^{T-1} 1 (:class:`Transfer`), float64 [n].

    Power iteration in log space: the row vector is renormalised after each product and the logs
    of its sums are added; once the renormalised vector is a fixed point (L1 change <= 1e-14) for
    every feature of the call, every later step multiplies by the same sum, which is added for the
    remaining steps at once.  With the sparse product the tilts of :data:`TILTS` are replayed from
    one recorded iteration per (chain, T) (:func:`_tilt_iteration`; the same numbers as iterating them
    here); the other features are iterated here."""
    V, n = chain.vocab_size, len(features)
    dense = n * V * V <= _DENSE_TRANSFER
    grid = {tilt: c for c, tilt in enumerate(TILTS)}
    # the dense batched product's rounding may depend on the batch (threads split it): small chains, cheap, one batch
    tilt_pos = [] if dense else [k for k, ft in enumerate(features)
                                 if isinstance(ft, TiltFeatures) and (ft.theta, ft.gamma) in grid]
    other_pos = [k for k in range(n) if k not in set(tilt_pos)]
    parts = []  # (positions in the call, the iteration, its rows)
    if tilt_pos:
        rows = torch.tensor([grid[(features[k].theta, features[k].gamma)] for k in tilt_pos])
        parts.append((tilt_pos, _tilt_iteration(chain, T, dense), rows))
    if other_pos:
        if dense or not all(isinstance(features[k], BigramFeatures) for k in other_pos):
            it = _PowerIteration(chain, [features[k].transfer(chain) for k in other_pos], dense)
        else:  # fitted log-ratios: one product with the shared top-K kernel, plus each one's corrections
            split = [features[k].split_transfer(chain) for k in other_pos]
            it = _PowerIteration(chain, [t for _, t in split], dense, torch.stack([w for w, _ in split]))
        parts.append((other_pos, it, None))

    def rows_of(t: int) -> list[tuple[torch.Tensor, ...]]:
        out = []
        for _, it, rows in parts:
            rec = it.record(t)
            out.append(rec if rows is None else tuple(None if r is None else r[rows] for r in rec))
        return out

    step, recs = 1, rows_of(1)
    if dense:  # one batch; every feature stops when all have converged
        while step < T:
            recs = rows_of(step + 1)
            step += 1
            if all(bool(conv.all()) for _, _, conv in recs):
                recs = [(log_z + (T - step) * slog, None, None) for log_z, slog, _ in recs]
                break
        log_z = torch.empty(n, dtype=torch.float64)
        for (pos, _, _), (lz, _, _) in zip(parts, recs):
            log_z[pos] = lz
        return log_z
    # sparse: each feature stops at its own fixed point, so its value does not depend on the call's other features
    log_z = torch.cat([lz for lz, _, _ in recs])
    done = torch.zeros(n, dtype=torch.bool)
    while step < T and not bool(done.all()):
        recs = rows_of(step + 1)
        step += 1
        lz, slog, conv = (torch.cat(r) for r in zip(*recs))
        log_z = torch.where(done, log_z, torch.where(conv, lz + (T - step) * slog, lz))
        done = done | conv
    out = torch.empty(n, dtype=torch.float64)
    out[[k for pos, _, _ in parts for k in pos]] = log_z
    return out


def _values(ft, codes: torch.Tensor, chain: MarkovChain) -> torch.Tensor:
    return ft.values(codes, chain) if isinstance(ft, TiltFeatures) else ft.values(codes, chain.vocab_size)


def _half_bound(fit: torch.Tensor, evaluate: torch.Tensor, chain: MarkovChain, T: int) -> torch.Tensor:
    """F chosen and fitted on ``fit`` codes only; F(x) - log E_p[e^F] for each sequence of ``evaluate``.

    Candidates: the tilts of :data:`TILTS`, scored by their bound on ``fit`` (nothing is fitted);
    the smoothed log-ratios of :data:`CANDIDATES`, scored by two-fold cross-fitting within ``fit``;
    the best one is refitted on all of ``fit``.  None scoring above 0: F = 0."""
    tilts = [TiltFeatures(th, g) for th, g in TILTS]
    folds = (fit[0::2], fit[1::2])
    counts = [pair_counts(f, chain.vocab_size) for f in folds]  # the same for every candidate
    feats = [fit_features(folds[k], chain, a, lam, counts[k]) for a, lam in CANDIDATES for k in (0, 1)]
    log_z = log_partition(chain, tilts + feats, T)
    lp, lpi = (float(v.mean()) for v in TiltFeatures.statistics(fit, chain))  # F of a tilt is linear in them
    scores = [ft.theta * lp + ft.gamma * lpi - float(log_z[c]) for c, ft in enumerate(tilts)]
    # every candidate fitted on fold k holds that fold's pairs: one lookup of the other fold's codes serves them all
    where = [None if chain.vocab_size ** 2 <= _DENSE_TABLE or not counts[k][0].numel()
             else pair_positions(counts[k][0], folds[1 - k].reshape(-1)) for k in (0, 1)]
    for c in range(len(CANDIDATES)):
        scores.append(sum(float(feats[2 * c + k].values(folds[1 - k], chain.vocab_size, where[k]).mean()
                                - log_z[len(tilts) + 2 * c + k]) for k in (0, 1)) / 2)
    top = max(range(len(scores)), key=lambda c: scores[c])
    if scores[top] <= 0:
        return torch.zeros(evaluate.shape[0], dtype=torch.float64)
    best = tilts[top] if top < len(tilts) else fit_features(fit, chain, *CANDIDATES[top - len(tilts)])
    return _values(best, evaluate, chain) - log_partition(chain, [best], T)[0]


@dataclass(frozen=True)
class DVBound:
    """The cross-fitted bound per token: ``value``, with the per-half standard errors ``se`` (per
    token) and the degrees of freedom ``df`` that its confidence bounds need (:meth:`interval`)."""

    value: float
    se: tuple[float, float]
    df: int

    def interval(self, confidence: float) -> tuple[float, float]:
        """(lower, upper) one-sided confidence bounds at level ``confidence`` on the DV bound: the lower
        one bounds KL(q || p) / T from below; the upper one only the DV bound (not the KL)."""
        if self.df < 1:
            return self.value, self.value
        half = float(student_t.ppf(confidence, self.df)) * (self.se[0] + self.se[1]) / 2
        return self.value - half, self.value + half


def dv_lower_bound(codes: torch.Tensor, chain: MarkovChain) -> DVBound:
    """The cross-fitted Donsker-Varadhan bound of the module docstring from the transition codes
    [N, T - 1] of N sequences in index order.  With N < 4 (a half needs two sequences for its
    spread) it is the trivial bound 0."""
    N, T = codes.shape[0], codes.shape[1] + 1
    if N < 4:
        return DVBound(0.0, (0.0, 0.0), 0)
    halves = (codes[0::2], codes[1::2])
    means, ses = [], []
    for k in (0, 1):
        terms = _half_bound(halves[k], halves[1 - k], chain, T)
        means.append(float(terms.mean()) / T)
        ses.append(float(terms.std()) / math.sqrt(terms.numel()) / T)
    return DVBound((means[0] + means[1]) / 2, (ses[0], ses[1]), min(h.shape[0] for h in halves) - 1)
