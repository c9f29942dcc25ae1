"""The EB-sampler: entropy-bounded unmasking (NEUIR/PC-Sampler ``src/generate.py``,
``generate_with_eb_sampler``); see ``docs/samplers/confidence.md``.

Ben-Hamu et al., "Accelerated Sampling from Masked Diffusion Models via Entropy Bounded Unmasking"
(arXiv:2505.24857).

At each step every masked position i of the sequence (no blocks, as upstream) gets LLaDA's proposal
x̂_i and the entropy H_i = H(p_i) of its posterior (no temperature).  The masked positions are sorted
by entropy ascending (ties by ``tie_rule``) and the first k commit, k the largest with

    sum_{j <= k} H_(j) - max_{j <= k} H_(j) <= gamma          (k >= 1),

so the entropy of the committed set beyond its largest term stays below gamma.  The loop runs until
no mask is left: the number of steps (denoiser evaluations) is adaptive and counted per sequence.
``steps`` does not change the algorithm (upstream has no such argument); it keys the randomness.

At gamma = 0 (and temperature 1) a step commits one position - plus any of zero entropy, whose
token is certain - chosen from the entropies alone, with a token drawn from its exact conditional:
exact sequential sampling in a state-dependent order, so the output law is the chain's.

The sampler is a rule (:mod:`dllm_lit.samplers.rule`): score -H(p) of the row alone, the count an
``adaptive_count``, and ``prefix_decides`` (the count of the first sorted scores is the row's once
their entropy sum exceeds gamma) lets the engine partially select instead of sorting every step.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks
from dllm_lit.decoding import posterior_entropy, ranking_options, with_tie_rule
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.rule import RuleSampler

__all__ = ["EBSampler", "entropy_bound_count", "entropy_bound_prefix_exact"]


def entropy_bound_count(sorted_neg_entropy: torch.Tensor, gamma: float) -> torch.Tensor:
    """#{k : sum_{j<=k} H_(j) - max_{j<=k} H_(j) <= gamma}, at least 1, per row of -H sorted descending
    (-inf = no position), as upstream counts it."""
    valid = torch.isfinite(sorted_neg_entropy)
    H = torch.where(valid, -sorted_neg_entropy, torch.zeros_like(sorted_neg_entropy))
    ok = (H.cumsum(1) - H.cummax(1).values <= gamma) & valid
    return ok.sum(1).clamp(min=1)


def entropy_bound_prefix_exact(prefix: torch.Tensor, gamma: float, vocab_size: int) -> torch.Tensor:
    """Per row of the first P scores -H sorted descending: whether :func:`entropy_bound_count` of the prefix is
    that of the whole row.  True when the row has fewer than P positions (the rest is -inf), or when the prefix's
    entropy sum S_P already exceeds gamma by a rounding margin: for k > P, with 0 <= H <= log V (+ 1 for
    rounding) and u = 2^-53, the tested fl(fl(S_(k-1) + H_k) - H_k) >= (S_P (1 - u) - u H_k)(1 - u) > gamma,
    so no later k passes (the bound test uses a 1e-12 margin, far above u)."""
    valid = torch.isfinite(prefix)
    H = torch.where(valid, -prefix, torch.zeros_like(prefix))
    total = H.cumsum(1)[:, -1]
    h_max = math.log(max(vocab_size, 1)) + 1.0
    return ~valid[:, -1] | (total * (1.0 - 1e-12) - 1e-12 * h_max > gamma)


class EBSampler(RuleSampler):
    """Entropy-bounded parallel unmasking (see module docstring): a rule ranking by -H(p) alone
    (``reads_tokens = False``: proposals drawn only where positions commit) with an adaptive count.

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: keys the randomness only (a grid gives replicates).
        gamma: entropy budget >= 0 (upstream's evaluations use 0.01; function default 0.1).
        temperature: 0 = argmax proposals (upstream default); tau > 0 samples p^(1/tau).
        tie_rule: order of equal entropies ("lowest", "highest", "random").
    """

    sampler_name = "eb_sampler"
    reads_tokens = False
    no_log_q_reason = Sampler.no_log_q_reason

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, gamma: float = 0.01,
                 temperature: float = 0.0, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps)
        self.gamma = checks.real("gamma", gamma, 0.0)
        ranking_options(self, temperature, tie_rule)

    @property
    def name(self) -> str:
        base = "eb_sampler" if self.gamma == 0.01 else f"eb_sampler_g{self.gamma:g}"
        return with_tie_rule(base, self.tie_rule)

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # None (the argmax) at temperature 0

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return -posterior_entropy(probs)  # the most certain positions first

    def adaptive_count(self, sorted_scores: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
        return entropy_bound_count(sorted_scores, self.gamma)

    def prefix_decides(self, prefix: torch.Tensor) -> torch.Tensor:
        return entropy_bound_prefix_exact(prefix, self.gamma, self.vocab_size)
