"""MaskGIT iterative decoding with a mask schedule and choice temperature; see ``docs/samplers/maskgit.md``.

Chang et al., "MaskGIT: Masked Generative Image Transformer" (arXiv:2202.04200); followed in
google-research/maskgit ``maskgit/libml/parallel_decode.py`` (``decode``, ``mask_by_random_topk``)
and ``maskgit/libml/mask_schedule.py`` (the yair-schiff/maskgit copy, strategy ``"maskgit"``).

With N = T masked positions at the start and S = steps, step t = 0..S-1 does:

1. at every masked position l, a proposal x̂_l ~ p_l^(1/tau) (upstream: tau = 1, ``categorical``
   on the logits) with confidence log p_l(x̂_l) (untempered);
2. if t = S - 1: every proposal is committed (upstream returns the last step's proposals,
   recorded before its re-masking);
3. otherwise, with r = (t + 1) / S and gamma(r) = cos(pi r / 2) ("cosine") or 1 - r ("linear",
   upstream's "uniform") clipped to [1e-6, 1],

       n_t = max(1, min(#masked - 1, floor(N gamma(r))))

   positions stay masked: those whose score  log p_l(x̂_l) + c (1 - r) G_l  (G_l ~ Gumbel(0, 1),
   c = ``choice_temperature``) is strictly below the (n_t + 1)-th smallest score among the masked
   positions (committed tokens score +inf and never change).  Every other proposal is committed.

At c (1 - r) = 0 equal confidences tie and upstream's strict "<" keeps all tied positions at the
cut-off committed (so fewer than n_t may stay masked); at c > 0 ties have probability zero and
exactly n_t stay masked.  The committed set is then the Gumbel top-(#masked - n_t) of
log p(x̂) / (c (1 - r)), i.e. a Plackett-Luce draw with weights p(x̂)^(1 / (c (1 - r))).

Every step calls the model (upstream has no cache): NFE = S.  With S > T some steps commit nothing
(one position stays masked until the last step); upstream spends those calls too.

The sampler is a rule (:mod:`dllm_lit.samplers.rule`) that decodes by cuts: it declares the proposal law
(``propose``), the score of a confidence (``confidence_score``: log), the annealed noise scale (``gumbel_scale``)
and the re-masking count (``remasked``); the engine (:mod:`dllm_lit.decoding.cut_decoding`) runs the steps, drawing
proposals only where a score can reach the cut on the exact oracle (same commits).  Uniforms are counter-based:
proposals Stream.TOKEN, Gumbel noise Stream.ORDER, both at (step t, position).  The schedule is computed in float64
(upstream: float32, which can round floor(N gamma) down by one at exact products such as cos(pi / 3) N).
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.rule import RuleSampler

__all__ = ["MaskGIT", "SCHEDULES", "mask_ratio", "num_masked_next"]

SCHEDULES = ("cosine", "linear")


def mask_ratio(r: float, schedule: str = "cosine") -> float:
    """gamma(r) clipped to [1e-6, 1] (upstream ``mask_schedule.schedule``: "cosine" or "uniform" = linear)."""
    g = math.cos(math.pi / 2.0 * r) if schedule == "cosine" else 1.0 - r
    return min(max(g, 1e-6), 1.0)


def num_masked_next(N: int, t: int, S: int, unknown: torch.Tensor | int, schedule: str = "cosine"):
    """n_t = max(1, min(unknown - 1, floor(N gamma((t + 1) / S)))): positions left masked after step t < S - 1."""
    n = math.floor(N * mask_ratio((t + 1) / S, schedule))
    if isinstance(unknown, int):
        return max(1, min(unknown - 1, n))
    return (unknown - 1).clamp(max=n).clamp(min=1)


class MaskGIT(RuleSampler):
    """MaskGIT decoding (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: decoding iterations S (or a grid).
        choice_temperature: c >= 0, scale of the Gumbel noise on the confidences, annealed by
            (1 - (t + 1) / S) (upstream default 4.5; 0 = deterministic low-confidence re-masking).
        schedule: "cosine" (upstream default) or "linear" (upstream's "uniform").
        temperature: tau >= 0 of the proposal draw p^(1/tau) (upstream 1; 0 = argmax).
    """

    sampler_name = "maskgit"
    no_log_q_reason = "positions are committed by the confidence of the drawn proposals, so the order depends on the tokens"
    announces_blocks = False  # one block, no block events

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 choice_temperature: float = 4.5, schedule: str = "cosine", temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.choice_temperature = checks.real("choice_temperature", choice_temperature, 0.0)
        self.schedule = checks.choice("schedule", schedule, SCHEDULES)
        self.temperature = checks.real("temperature", temperature, 0.0)
        #: reuse posterior features between steps (exact; see dllm_lit.decoding.posterior_cache)
        self.use_cache = True

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # p^(1/tau); None (the argmax) at tau = 0

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """log p(x̂), without the noise (the engine adds it: :meth:`gumbel_scale`)."""
        return self.confidence_score(probs.gather(1, tok[:, None]).squeeze(1).to(torch.float64))

    def confidence_score(self, conf: torch.Tensor) -> torch.Tensor:
        return conf.log()

    def gumbel_scale(self, step: int, steps: int) -> float:
        """c (1 - (t + 1) / S): the choice temperature annealed to 0 at the last step."""
        return self.choice_temperature * (1.0 - (step + 1) / steps)

    def remasked(self, n: int, step: int, steps: int, masked: torch.Tensor | int) -> torch.Tensor | int:
        return num_masked_next(n, step, steps, masked, self.schedule)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """One call per step, as upstream (also at a step that commits nothing)."""
        return None if steps is None else float(steps)
