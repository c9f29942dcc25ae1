r"""The information curve Z_j beyond the first-order chain: exact by enumeration (tiny worlds), and a
Rao-Blackwellised estimate (any world the oracle answers).

With h_m the mean, over the m-subsets R of the T positions, of the joint entropy H(X_R) (h_0 = 0),

    Z_j = E I(X_i; X_S) = h_1 + h_{j-1} - h_j        (i uniform, S a uniform (j - 1)-subset of the others),

since I(X_i; X_S) = H(X_i) + H(X_S) - H(X_{S+i}) and S + i is a uniform j-subset.  **Exact**
(:func:`exact_information_curve`): H(X_R) sums p(x_R) log p(x_R) over the V^|R| values of x_R, each p(x_R)
by the forward algorithm with the other positions marginalised, (V + 1)^T evaluations in all.  In a hidden-state
world I(X_i; X_S) depends on every revealed token, and the entropy of a hidden Markov process has no closed
form, so no polynomial exact method is implemented beyond the first-order chain (:mod:`~dllm_lit.theory.information`).

**Rao-Blackwellised** (:func:`rao_blackwell_conditionals`): along a uniformly random order o of an exact sample x,
with R_j = {o_1..o_{j-1}},

    c~_j = - mean_{i not in R_j} H(X_i | x_{R_j})       (the entropy of the oracle's row at every masked position)

is the conditional expectation, given (x_{R_j}, R_j), of today's c_j = log p(x_{o_j} | x_{R_j})
(:func:`~dllm_lit.samplers.reference_scoring.order_log_conditionals`): the next position and its token are averaged
out exactly.  So E c~_j - E c~_1 = Z_j as before, :mod:`~dllm_lit.theory.monte_carlo`'s estimators apply unchanged,
and the variance can only drop (Rao-Blackwell).  It reads the same samples and orders (seed, sequence index) as
``order_log_conditionals``, so the two estimates are paired.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch

__all__ = ["exact_information_curve", "subset_entropies", "rao_blackwell_conditionals", "MAX_EVALUATIONS", "MAX_ROW_BYTES"]

#: revealed patterns x_R the exact curve may enumerate, (V + 1)^T in all
MAX_EVALUATIONS = 2_000_000
#: bytes of the float64 posterior rows one rao_blackwell_conditionals call holds
MAX_ROW_BYTES = 2**31


def _world(world):
    from dllm_lit.markov.hmm import HMMWorld

    return world if isinstance(world, HMMWorld) else HMMWorld.from_chain(world)


def subset_entropies(world, length: int, max_evaluations: int = MAX_EVALUATIONS) -> np.ndarray:
    """h[m] = mean over the m-subsets R of [0, T) of H(X_R) in nats, m = 0..T (float64 [T + 1]), by enumeration."""
    w = _world(world)
    T, V = int(length), w.vocab_size
    if T < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if (V + 1) ** T > max_evaluations:
        raise ValueError(f"length={T}: the exact curve enumerates (V + 1)^T = {float((V + 1) ** T):.3g} revealed "
                         f"patterns for V = {V}, more than {max_evaluations}; estimate it with rao_blackwell_conditionals")
    if w.horizon is not None:
        w.check_length(T)
    Bt = w.B.T.contiguous()  # [V, S]
    h = np.zeros(T + 1)
    for m in range(1, T + 1):
        values = torch.tensor(list(itertools.product(range(V), repeat=m)), dtype=torch.long)  # [V^m, m]
        total = 0.0
        for R in itertools.combinations(range(T), m):
            a = w.initial[None].expand(values.shape[0], -1)
            k = 0
            for t in range(T):
                if t > 0:
                    a = w.right(a)
                if k < m and R[k] == t:
                    a = a * Bt[values[:, k]]
                    k += 1
            p = a.sum(1)
            p = p[p > 0]
            total += float(-(p * p.log()).sum())
        h[m] = total / math.comb(T, m)
    return h


def exact_information_curve(world, length: int, max_evaluations: int = MAX_EVALUATIONS) -> np.ndarray:
    """Z[j] = h_1 + h_{j-1} - h_j for j = 1..T (Z[0] = 0 unused), exact for any HMM world (or chain) small enough
    to enumerate; float64 [T + 1] (module docstring)."""
    h = subset_entropies(world, length, max_evaluations)
    Z = np.zeros_like(h)
    Z[1:] = h[1] + h[:-1] - h[1:]
    return Z


@torch.no_grad()
def rao_blackwell_conditionals(chain, denoiser, indices: torch.Tensor, seq_len: int, seed: int) -> torch.Tensor:
    """c~[b, j] = -mean over the positions still masked at rank j of the entropy of the oracle's row there, for the
    exact samples and random orders of :func:`~dllm_lit.samplers.reference_scoring.order_log_conditionals`
    (float64 [B, T]; the denoiser's rows read in float64)."""
    from dllm_lit.decoding.ordered_decoding import random_order_steps
    from dllm_lit.samplers.reference_scoring import reference_samples

    T = int(seq_len)
    rows = indices.numel() * T * chain.vocab_size * 8
    if rows > MAX_ROW_BYTES:
        raise ValueError(f"indices x seq_len: one call holds {indices.numel()} x {T} posterior rows of "
                         f"{chain.vocab_size} float64 ({rows / 2**30:.3g} GiB), more than {MAX_ROW_BYTES / 2**30:g} GiB; "
                         "pass fewer indices per call")
    x = reference_samples(chain, indices, T, seed)
    if x is None:
        raise ValueError("rao_blackwell_conditionals needs consecutive sequence indices")
    rank = random_order_steps(seed, indices, T, T, 0, T, 1).to(x.device)  # [B, T]: the rank of each position
    mask_id = chain.vocab_size
    out = torch.empty(x.shape[0], T, dtype=torch.float64)
    for j in range(T):
        masked = rank >= j
        z = torch.where(masked, torch.full_like(x, mask_id), x)
        logp = denoiser.log_posterior(z).to(torch.float64)
        H = -(logp.exp() * logp.clamp_min(-745.0)).sum(-1)  # 0 log 0 = 0
        out[:, j] = -((H * masked).sum(1) / masked.sum(1)).cpu()
    return out
