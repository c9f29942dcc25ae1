r"""The forward direction of the sequence KL for samplers whose unmasking order ignores the tokens.

For such a sampler the law of a sample given its order o is q(x | o) = prod_i q_i(x_i | x_revealed before i),
q_i the law its token is drawn from.  Scoring an *exact chain sample* x ~ p (the run's reference row:
``chain.sample`` with the run's seed and the same sequence index) under q(. | o), o drawn by the sampler
independently of x, gives

    E[log p(x) - log q(x | o)] = E_o KL(p || q(. | o)),

an unbiased per-sequence estimate of the forward KL (chain || sampler) given the order; by convexity it
bounds KL(p || q) of the sampler's marginal law from above.  It is the quantity the random-order theory
predicts exactly (:mod:`dllm_lit.theory`, ``docs/theory.md``).  A token the sampler's law gives
probability 0 (a deterministic argmax fill that disagrees with x) counts log(1e-30), as ``nll`` does.

:func:`reference_log_ratio` teacher-forces x through :func:`~dllm_lit.decoding.ordered_decoding.decode_in_order`
with the sampler's own decode steps: the denoiser sees exactly the states the sampler would see had it drawn x.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.decoding import decode_in_order

__all__ = ["reference_log_ratio", "teacher_forced_log_q", "order_log_conditionals", "forward_stats", "random_order_theory", "chain_information", "LOG_FLOOR", "LogLaw",
           "THEORY_STATS"]

#: probability floor of a scored token (the transition metrics' clamp)
LOG_FLOOR = 1e-30

#: ``log_law(j, b, p, probs, tokens)`` -> log q of ``tokens`` [n] under the law the sampler draws from at step j
LogLaw = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def reference_samples(chain, indices: torch.Tensor, seq_len: int, seed: int) -> torch.Tensor | None:
    """The reference row's exact chain samples for ``indices`` (consecutive), or None when they are not consecutive."""
    start = int(indices[0])
    if not torch.equal(indices.cpu(), torch.arange(start, start + indices.numel())):
        return None
    return chain.sample(indices.numel(), int(seq_len), seed=seed, start_index=start, device=indices.device)


def reference_log_ratio(chain, denoiser, indices: torch.Tensor, seq_len: int, seed: int, decode: torch.Tensor,
                        num_steps: int, log_law: LogLaw) -> torch.Tensor:
    """log p(x) - log q(x | o) per sequence (float64 [B], NaN when the indices are not consecutive) for the
    reference samples x of ``indices``, o given by ``decode`` (the sampler's decode steps, all >= 0)."""
    B = indices.numel()
    x = reference_samples(chain, indices, seq_len, seed)
    if x is None:
        return torch.full((B,), float("nan"), dtype=torch.float64)
    log_q = teacher_forced_log_q(denoiser, x, decode, num_steps, log_law)
    return (chain.log_prob(x.cpu()).to(torch.float64) - log_q.sum(1).cpu())


def teacher_forced_log_q(denoiser, x: torch.Tensor, decode: torch.Tensor, num_steps: int,
                         log_law: LogLaw, floor: bool = True) -> torch.Tensor:
    """log q(x_i | x revealed before i's step) per position (float64 [B, T]; floored at LOG_FLOOR unless
    ``floor`` is False: then a token of probability 0 gives -inf)."""
    low = torch.tensor(LOG_FLOOR if floor else 0.0, dtype=torch.float64).log()

    def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
        tok = x[b, p]
        return tok, torch.maximum(log_law(j, b, p, probs, tok).to(torch.float64), low.to(probs.device))

    log_q = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    decode_in_order(denoiser, torch.full_like(x, denoiser.mask_id), decode, num_steps, draw, log_q=log_q)
    return log_q


def order_log_conditionals(chain, denoiser, indices: torch.Tensor, seq_len: int, seed: int) -> torch.Tensor:
    """c[b, j] = log p(x_{o_j} | x_{o_1}, .., x_{o_{j-1}}) (float64 [B, T], j = rank in the order) for the exact
    chain samples x of ``indices`` (the reference row's) along a uniformly random order o per sequence (the paper
    MDLM's order at steps = T), under ``denoiser``'s conditionals (the exact ones with an oracle).

    For any law, E c_j - E c_1 = Z_j (the information curve: o_j is uniform and {o_1..o_{j-1}} a uniform
    (j - 1)-subset of the others), so these give an exact-sample Monte Carlo estimate of Z and of a schedule's
    expected KL where no closed form is implemented (HMM worlds; :func:`dllm_lit.theory.monte_carlo.schedule_kl_estimate`)."""
    from dllm_lit.decoding import random_order_steps
    from dllm_lit.samplers.draws import drawn_log_prob

    T = int(seq_len)
    x = reference_samples(chain, indices, T, seed)
    if x is None:
        raise ValueError("order_log_conditionals needs consecutive sequence indices")
    decode = random_order_steps(seed, indices, T, T, 0, T, 1)
    log_q = teacher_forced_log_q(denoiser, x, decode, T - 1, lambda j, b, p, probs, tok: drawn_log_prob(probs, tok))
    return torch.empty_like(log_q).scatter_(1, decode.to(log_q.device), log_q).cpu()


#: theory key of :func:`random_order_theory` -> the per-sequence statistic of :func:`forward_stats`
THEORY_STATS = {"theory": "fwd_theory", "tc": "fwd_bound_tc", "dtc": "fwd_bound_dtc", "mi": "fwd_bound_mi"}


def forward_stats(chain, denoiser, indices: torch.Tensor, seq_len: int, seed: int, decode: torch.Tensor,
                  num_steps: int, log_law: LogLaw, theory: dict[str, float | None] | None) -> dict[str, torch.Tensor]:
    """``{"ref_log_ratio", "fwd_theory", "fwd_bound_tc", "fwd_bound_dtc", "fwd_bound_mi"}`` (float64[B] each): the
    per-sequence forward log-ratio, and the predicted E_o KL(p || q(. | o)) per token and its three bounds per
    token from ``theory`` (:func:`random_order_theory`; the same for every sequence, NaN where none applies)."""
    B, T = indices.numel(), int(seq_len)
    out = {"ref_log_ratio": reference_log_ratio(chain, denoiser, indices, seq_len, seed, decode, num_steps, log_law)}
    for key, stat in THEORY_STATS.items():
        v = None if theory is None else theory.get(key)
        out[stat] = torch.full((B,), float("nan") if v is None else v / T, dtype=torch.float64)
    return out


def random_order_theory(sampler, blocks) -> dict[str, float | None] | None:
    """``{"theory", "tc", "dtc", "mi"}`` in nats: the exact E_o KL(p || q(. | o)) (:func:`dllm_lit.theory.blocks_kl`
    of ``blocks``) and its TC / DTC / full-conditional bounds (:func:`dllm_lit.theory.blocks_bounds`; None for
    coin-drawn rounds), when the sampler runs the exact oracle on a chain of at most 512 tokens and each block's
    information curve fits this machine (:func:`dllm_lit.theory.information.check_curve_size`); None otherwise."""
    from dllm_lit.denoisers.oracle import OracleDenoiser
    from dllm_lit.theory import blocks_bounds, blocks_kl
    from dllm_lit.theory.information import check_curve_size

    chain = sampler.chain
    if chain is None or chain.vocab_size > 512 or not isinstance(sampler.denoiser, OracleDenoiser):
        return None
    try:
        for length in {int(b[0]) for b in blocks}:
            check_curve_size(length)
    except ValueError:  # a prediction column left empty, not a refused run
        return None
    info = chain_information(chain)
    bounds = blocks_bounds(info, blocks) or {}
    return {"theory": blocks_kl(info, blocks), "tc": bounds.get("tc"), "dtc": bounds.get("dtc"),
            "mi": bounds.get("mi")}


_INFO: dict[str, object] = {}


def chain_information(chain):
    """The :class:`~dllm_lit.theory.ChainInformation` of ``chain`` (one per chain fingerprint per process)."""
    from dllm_lit.theory import ChainInformation

    key = chain.fingerprint
    if key not in _INFO:
        _INFO[key] = ChainInformation(chain)
    return _INFO[key]
