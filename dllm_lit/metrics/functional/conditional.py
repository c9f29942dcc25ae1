r"""Prompted runs against the exact conditional law: a per-prompt sequence-KL bracket and NLL, averaged over prompts.

M prompts c_m (canvases), R continuations each (:mod:`dllm_lit.experiments.prompted`), G_m free positions.  Per
sequence, log p(x | c) = log p(x) - log p(c) (exact, :func:`~dllm_lit.markov.world_api.conditional_log_prob`).
Every value is a mean over prompts of a per-prompt mean, and every interval is over the M prompts (the prompts
are independent; the R continuations of one prompt share it):

* ``cond_seq_kl_upper`` = mean_m mean_r (log q - log p(x | c_m)) / G_m, log q the sampler's path log-probability
  (samplers whose order ignores the tokens): E_o KL(q(. | o, c) || p(. | c)) / G >= KL(q(. | c) || p(. | c)) / G
  per prompt, as ``seq_kl_upper`` (:mod:`~dllm_lit.metrics.functional.sequence_kl`) but conditional; exactly 0
  with interval [0, 0] for a row whose law is declared exact (``exact``: exact conditional sampling, or a sampler
  declaring its law exact on the exact oracle, :func:`~dllm_lit.experiments.prompted.law_is_exact`), whatever the float
  rounding of log q - log p; else Hall's skewness-corrected t interval over prompts.
* ``cond_seq_kl_lower``: a Donsker-Varadhan bound KL(q || p) >= E_q[g] - log E_p[e^g] per prompt with
  g(x) = sum_t g_t(x_t) position-wise, cross-fitted: g_t(v) = log q_hat_t(v) - log p_bar_t(v) (smoothed empirical
  marginals of one half of the prompts over their exact conditional marginals) scores the other half, where
  log E_{p(. | c)}[e^g] is exact (the tilted forward algorithm, :func:`~dllm_lit.markov.hmm_conditional.log_evidence`).
  Unbiased for a valid lower bound; its interval's low end is a one-sided lower confidence bound (Student t over
  prompts).  It sees errors of the positions' marginals only (the upper end sees the rest).
* ``cond_nll`` = mean -log p(x | c) / G; ``cond_nll_excess`` = the same minus the exact continuations' (the
  reference row, same indices): E_q[-log p] - E_p[-log p] per token, 0 for an exact sampler (paired t interval).
* transition metrics against the exact conditional pair law (``cond_pair_*``, with their exact-continuation
  floor subtracted in ``cond_pair_kl_excess`` / ``cond_pair_tv_excess``):
  :mod:`~dllm_lit.metrics.functional.conditional_pairs`.
"""
from __future__ import annotations

import math

import torch
from scipy.stats import t as student_t

from dllm_lit.markov.world_api import exact_world
from dllm_lit.metrics.functional.conditional_pairs import PAIR_KEYS, pair_values
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval

__all__ = ["CONDITIONAL_KEYS", "per_prompt_mean", "conditional_values", "dv_lower_terms"]

CONDITIONAL_KEYS = ("cond_seq_kl_upper", "cond_seq_kl_lower", "cond_nll", "cond_nll_excess", *PAIR_KEYS)
Value = tuple[float | None, tuple[float, float] | None]


def per_prompt_mean(values: torch.Tensor, prompt: torch.Tensor, num_prompts: int) -> torch.Tensor:
    """Mean of ``values`` [N] over the sequences of each prompt: float64 [M]."""
    v = values.to(torch.float64)
    s = torch.zeros(num_prompts, dtype=torch.float64).index_add_(0, prompt, v)
    n = torch.zeros(num_prompts, dtype=torch.float64).index_add_(0, prompt, torch.ones_like(v))
    return s / n


def _mean_interval(per_prompt: torch.Tensor, confidence: float) -> Value:
    return float(per_prompt.mean()), skew_corrected_t_interval(per_prompt, confidence)


def dv_lower_terms(world, samples: torch.Tensor, prompt: torch.Tensor, canvases: torch.Tensor,
                   smoothing: float = 0.5) -> torch.Tensor | None:
    """Per-prompt DV terms (E_q[g] - log E_p[e^g]) / G_m [M], g cross-fitted over the two halves of the prompts
    (module docstring); None for a world without the tilted evidence (an :class:`ExactWorld` of its own)."""
    w = exact_world(world)
    inner = getattr(w, "world", None)
    if inner is None:
        return None
    from dllm_lit.markov.hmm_conditional import log_evidence

    M, T = canvases.shape
    V = w.vocab_size
    free = canvases == w.mask_id  # [M, T]
    marg = w.posterior(canvases)  # [M, T, V] exact conditional marginals
    fold = torch.arange(M) % 2
    out = torch.empty(M, dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(samples.long(), V).to(torch.float64)  # [N, T, V]
    for k in (0, 1):
        train, test = fold == k, fold != k
        seq_train = train[prompt]
        seen = free[prompt[seq_train]]  # [n, T]: where each training sequence was drawn
        counts = (onehot[seq_train] * seen[..., None]).sum(0)  # [T, V]
        n = seen.sum(0).to(torch.float64)
        q_hat = (counts + smoothing) / (n[:, None] + smoothing * V)
        p_bar = (marg[train] * free[train][..., None]).sum(0) / free[train].sum(0).clamp_min(1)[:, None]
        g = torch.where(free[train].any(0)[:, None], q_hat.log() - p_bar.clamp_min(1e-300).log(), 0.0)  # [T, V]
        rows = test.nonzero().reshape(-1)
        g_m = g[None] * free[rows][..., None]  # g only at each prompt's free positions
        tilted = log_evidence(inner, canvases[rows], g_m.exp()) - log_evidence(inner, canvases[rows])
        seq = test[prompt]
        loc = torch.full((M,), -1, dtype=torch.long)
        loc[rows] = torch.arange(rows.numel())
        eq = (onehot[seq] * g_m[loc[prompt[seq]]]).sum((1, 2))
        eq = per_prompt_mean(eq, prompt[seq], M)[rows]
        out[rows] = (eq - tilted) / free[rows].sum(1)
    return out


def conditional_values(world, samples: torch.Tensor, prompt: torch.Tensor, canvases: torch.Tensor,
                       log_q: torch.Tensor, log_p: torch.Tensor, reference_log_p: torch.Tensor | None = None,
                       confidence: float = 0.95, reference_samples: torch.Tensor | None = None,
                       exact: bool = False) -> dict[str, Value]:
    """``{key: (value, (low, high))}`` over :data:`CONDITIONAL_KEYS` (module docstring); None where unavailable.
    ``reference_log_p`` / ``reference_samples``: the exact continuations of the same prompts (same ``prompt``);
    ``exact``: the row's law is declared exact (``cond_seq_kl_upper`` = 0 exactly)."""
    M = canvases.shape[0]
    G = (canvases == exact_world(world).mask_id).sum(1).to(torch.float64)[prompt]
    out: dict[str, Value] = {k: (None, None) for k in CONDITIONAL_KEYS}
    if exact:
        out["cond_seq_kl_upper"] = (0.0, (0.0, 0.0))
    elif bool(torch.isfinite(log_q).all()):
        out["cond_seq_kl_upper"] = _mean_interval(per_prompt_mean((log_q - log_p) / G, prompt, M), confidence)
    dv = dv_lower_terms(world, samples, prompt, canvases)
    if dv is not None and M >= 2:
        m, s = float(dv.mean()), float(dv.std()) / math.sqrt(M)
        z = float(student_t.ppf(confidence, M - 1)) * s
        out["cond_seq_kl_lower"] = (m, (m - z, m + z))
    out["cond_nll"] = _mean_interval(per_prompt_mean(-log_p / G, prompt, M), confidence)
    if reference_log_p is not None:
        out["cond_nll_excess"] = _mean_interval(per_prompt_mean((reference_log_p - log_p) / G, prompt, M), confidence)
    out.update(pair_values(world, samples, prompt, canvases, reference_samples, confidence))
    return out
