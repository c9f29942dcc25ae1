"""How fast a chain's powers converge: the second eigenvalue modulus and the depth it forces on the oracle.

For an ergodic kernel P' with stationary law pi, every eigenvalue lam != 1 has a right eigenvector f with
pi^T f = 0, so (P'^d - 1 pi^T) f = lam^d f, and with r_d = max_{v,w} |P'^d(v, w) / pi(w) - 1|

    |lam|^d max|f| = max_v |sum_w pi(w) (P'^d(v, w) / pi(w) - 1) f(w)| <= r_d max|f|.

Hence r_d >= lam_*^d for the second eigenvalue modulus lam_* = max{|lam| : lam != 1}, and the oracle's table
(:mod:`dllm_lit.denoisers.oracle_cache`), certified at the first depth with r_D <= mixing_tol, needs at least

    D >= log(mixing_tol) / log(lam_*)

powers: a lower bound known before any power is computed.  A slowly mixing kernel (lam_* = 1 - 2e-9 for
[[1 - 1e-9, 1e-9], [1e-9, 1 - 1e-9]]) or a nearly periodic one (lam_* = 1 - 2e-9 for the eigenvalue -1 + 2e-9 of
[[1e-9, 1 - 1e-9], [1 - 1e-9, 1e-9]]) needs ~1e10 powers; the bundled English chain (lam_* = 0.398) needs 20 and
is certified at 22.

lam_* is computed from all eigenvalues of the dense kernel for V <= :data:`DENSE_EIGEN_MAX_VOCAB` (0.1 s at
V = 256), otherwise as the largest-modulus eigenvalue of the deflated operator P' - 1 pi^T (whose spectrum is
that of P' with the eigenvalue 1 replaced by 0) by ARPACK on the sparse-plus-rank-one kernel (0.1 s at
V = 1024, K = 64).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dllm_lit.markov.chain import MarkovChain

__all__ = ["second_eigenvalue_modulus", "certification_depth", "DENSE_EIGEN_MAX_VOCAB"]

#: all eigenvalues of the dense kernel up to this vocabulary size (O(V^3), 0.1 s at 256); ARPACK beyond
DENSE_EIGEN_MAX_VOCAB = 256


def second_eigenvalue_modulus(chain: "MarkovChain") -> float | None:
    """lam_* = max{|lam| : lam an eigenvalue of P' other than the Perron eigenvalue 1} of an ergodic chain (its
    eigenvalue 1 is simple); None when ARPACK does not converge (the estimate is then unknown)."""
    V = chain.vocab_size
    if V == 1:
        return 0.0
    if V <= DENSE_EIGEN_MAX_VOCAB:
        lam = np.linalg.eigvals(chain.kernel.numpy())
        return float(np.delete(np.abs(lam), np.argmin(np.abs(lam - 1.0))).max())
    import scipy.sparse as sp
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs

    K = chain.top_k
    S = sp.csr_matrix(((chain.nbr_prob * (1.0 - chain.eps)).numpy().ravel(),
                       (np.repeat(np.arange(V), K), chain.nbr_idx.numpy().ravel())), shape=(V, V))
    pi, nu, eps = chain.stationary.numpy(), chain.nu.numpy(), chain.eps

    def deflated(f: np.ndarray) -> np.ndarray:  # (P' - 1 pi^T) f with P' = S + eps 1 nu^T
        f = f.ravel()
        return S @ f + (eps * (nu @ f) - pi @ f)

    op = LinearOperator((V, V), matvec=deflated, dtype=np.float64)
    start = np.cos(np.arange(V, dtype=np.float64))  # a fixed start vector: the same estimate on every run
    try:
        lam = eigs(op, k=1, which="LM", v0=start, ncv=min(V - 1, 32), tol=1e-10, return_eigenvectors=False)
    except ArpackNoConvergence as exc:
        lam = exc.eigenvalues
    return float(np.abs(lam).max()) if len(lam) else None


def certification_depth(lam: float, mixing_tol: float) -> float:
    """The fewest powers a table certified at ``mixing_tol`` can have, log(mixing_tol) / log(lam) rounded up
    (module docstring): 1 for lam = 0, infinite for lam >= 1."""
    if lam <= 0.0:
        return 1.0
    if lam >= 1.0:
        return math.inf
    return float(max(1, math.ceil(math.log(mixing_tol) / math.log(lam))))


def hopeless_power_iteration(chain: "MarkovChain", start, max_iter: int) -> bool:
    """Whether the lazy power iteration of :attr:`MarkovChain.stationary` (kernel (I + P') / 2, eigenvalues
    (1 + lam) / 2) started from ``start`` is expected to need more than 10 ``max_iter`` iterations: its error
    ||start P' - start||_1 shrinks by rho = max{|1 + lam| / 2 : lam != 1} per iteration.  Only chains with one
    closed class and V <= :data:`DENSE_EIGEN_MAX_VOCAB` are judged (False otherwise: the iteration runs)."""
    from dllm_lit.markov.structure import chain_structure

    V = chain.vocab_size
    if V == 1 or V > DENSE_EIGEN_MAX_VOCAB or chain_structure(chain).reducible:
        return False
    P = chain.kernel.numpy()
    s = start.numpy()
    r0 = float(np.abs(s @ P - s).sum())
    if r0 <= chain.stationary_tol:
        return False
    lam = np.linalg.eigvals(P)
    rho = float(np.delete(np.abs(1.0 + lam) / 2.0, np.argmin(np.abs(lam - 1.0))).max())
    if rho >= 1.0:
        return True
    return math.log(chain.stationary_tol / r0) / math.log(rho) > 10 * max_iter


def stationary_by_solve(chain: "MarkovChain"):
    """pi with pi (P' - I) = 0 and sum pi = 1 by one dense float64 solve (the last balance equation replaced
    by the normalisation; backward stable, so the residual ||pi P' - pi||_1 is at rounding level however slowly
    the chain mixes), clipped at 0; None when the system is singular (more than one invariant law)."""
    import torch

    V = chain.vocab_size
    A = chain.kernel.numpy().T - np.eye(V)
    A[-1] = 1.0
    b = np.zeros(V)
    b[-1] = 1.0
    try:
        pi = np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        return None
    pi = np.clip(pi, 0.0, None)
    return torch.from_numpy(pi / pi.sum())
