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
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import decode_blocks, posterior_entropy, propose_tokens, ranking_options, with_tie_rule
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, tempered_law

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


class EBSampler(Sampler):
    """Entropy-bounded parallel unmasking (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: keys the randomness only (a grid gives replicates).
        gamma: entropy budget >= 0 (upstream's evaluations use 0.01; function default 0.1).
        temperature: 0 = argmax proposals (upstream default); tau > 0 samples p^(1/tau).
        tie_rule: order of equal entropies ("lowest", "highest", "random").
    """

    sampler_name = "eb_sampler"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, gamma: float = 0.01,
                 temperature: float = 0.0, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.gamma = checks.real("gamma", gamma, 0.0)
        ranking_options(self, temperature, tie_rule)

    @property
    def name(self) -> str:
        base = "eb_sampler" if self.gamma == 0.01 else f"eb_sampler_g{self.gamma:g}"
        return with_tie_rule(base, self.tie_rule)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples and the denoiser evaluations of each sequence (its number of steps)."""
        x = torch.full((indices.numel(), seq_len), self.mask_id, dtype=torch.long, device=indices.device)
        tau, gamma, tok_u = self.temperature, self.gamma, StepUniforms(seed, indices, steps)

        # the entropies alone rank the positions: proposals are drawn where they commit, from rows recomputed
        # there (the cache keeps the entropy per position - and the argmax at temperature 0 - no [V] rows)
        def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
            out = {"probs": probs, "entropy": posterior_entropy(probs)}
            if tau == 0:
                out["argmax"] = probs.argmax(-1)
            return out

        widths = {"probs": ((self.vocab_size,), None), "entropy": ((), torch.float64)}
        if tau == 0:
            widths["argmax"] = ((), torch.int64)
        nfe = decode_blocks(
            self.denoiser, x, [(0, seq_len)], features=features, widths=widths,
            propose=lambda view: propose_tokens(view, tau, tok_u), score=lambda view: -view.get("entropy"),
            tie_rule=self.tie_rule, tie_u=StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER),
            count=lambda sorted_scores, m: entropy_bound_count(sorted_scores, gamma), use_cache=self.use_cache,
            count_prefix=lambda prefix: entropy_bound_prefix_exact(prefix, gamma, self.vocab_size),
            fresh=("probs",), law=(lambda probs: tempered_law(probs, tau)) if tau > 0 else None,
            score_reads_tokens=False)
        return x, nfe
