"""Dream's diffusion sampler and its ``alg`` family (``generation_utils.py``: ``_sample``,
``sample_tokens``); see ``docs/samplers/confidence.md``.

Ye et al., "Dream 7B: Diffusion Large Language Models" (arXiv:2508.15487).  Upstream: HKUNLP/Dream
(the model's ``generation_utils.py``; a copy is in NVlabs/Fast-dLLM ``dream/model/generation_utils.py``).

Grid t_j = linspace(1, eps, steps + 1) (float32, as upstream); step j goes t = t_j -> s = t_{j+1}.
The proposal law at a masked position is q = softmax(log p / tau) (p itself at tau = 0), restricted
to Dream's top-p (the token crossing p is kept) and top-k sets and renormalised; the proposal is a
draw from q (tau > 0) or argmax q (tau = 0).

* ``origin``: every masked position is revealed with probability 1 - s/t (1 at the last step)
  with its proposal - MDLM-like.  Which positions reveal does not depend on the tokens, so the rule
  declares ``order = "random"`` and draws each position's step up front (:meth:`Dream.decode_steps`);
  only the revealed positions are queried.
* ``maskgit_plus`` / ``topk_margin`` / ``entropy``: n = floor(#mask (1 - s/t)) positions
  (all remaining at the last step) commit, the n best by score q(x̂), q_(1) - q_(2), or
  sum_v q_v log(q_v + 1e-10) (a negative entropy); with ``alg_temp`` > 0 the n positions are drawn
  without replacement from softmax(score / alg_temp) (Gumbel top-k, the law of upstream's
  ``torch.multinomial``: the rule's ``position_temperature``).  The counts are the same in every
  sequence, so they are computed up front, in float32 as upstream.

The ranked algs are a rule (:mod:`dllm_lit.samplers.rule`): the ranking is :meth:`Dream.score`; entropy and margin
read the posterior row only (``reads_tokens = False``: proposals are drawn where positions commit), and at
temperature 1 without filters the scores are bounded by a function of max_v p (``score_bound``; the entropy and
margin also by reference rows on the exact oracle, ``envelope``), which lets the engine score only where a position
can commit.  The engine picks the provider; the draws are those of scoring everything.

Dream's network is initialised from an autoregressive model, so upstream shifts its logits by one
position (``logits = cat([logits[:, :1], logits[:, :-1]])``): the prediction for position i is read
at i - 1.  That is a property of the network's output layout; the oracle returns p(x0_i | z) at i
directly, so there is nothing to shift.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.decoding import ranking_options, with_tie_rule
from dllm_lit.samplers.draws import StepUniforms, sharpen
from dllm_lit.decoding import check_top_p, top_k_filter, top_p_filter
from dllm_lit.decoding import coin_decode_steps
from dllm_lit.samplers.rule import GUMBEL_SLOT, RuleSampler, law_probability_score
from dllm_lit.decoding import ENVELOPE_SLACK as NEGENT_BOUND_SLACK

__all__ = ["Dream", "ALGS", "GUMBEL_SLOT", "NEGENT_BOUND_SLACK", "dream_grid", "dream_schedule", "dream_law"]

ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")


def dream_grid(steps: int, eps: float) -> torch.Tensor:
    """Upstream's ``torch.linspace(1, eps, steps + 1)`` (float32)."""
    return torch.linspace(1.0, eps, steps + 1, dtype=torch.float32)


def dream_schedule(num_masked: int, steps: int, eps: float) -> list[int]:
    """Positions committed at each step: int(#mask * (1 - s/t)) in float32, all remaining at the last step."""
    ts = dream_grid(steps, eps)
    out, n = [], int(num_masked)
    for i in range(steps):
        k = int(torch.tensor(float(n), dtype=torch.float32) * (1 - ts[i + 1] / ts[i])) if i < steps - 1 else n
        out.append(k)
        n -= k
    return out


def dream_law(probs: torch.Tensor, temperature: float, top_p: float | None, top_k: int | None) -> torch.Tensor:
    """q: p^(1/tau) (p at tau = 0), Dream's top-p then top-k, renormalised (float64 rows)."""
    if temperature == 1:  # sharpen's (p / max p) ** 1 without the power (torch's x ** 1.0 copies x), in place
        q = probs.to(torch.float64)
        q = q / q.amax(-1, keepdim=True)
        q = q.div_(q.sum(-1, keepdim=True))
    else:
        q = probs.to(torch.float64) if temperature == 0 else sharpen(probs, 1.0 / temperature)
        q = q / q.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1:
        q = top_p_filter(q, top_p, strict=False)
    if top_k is not None:
        q = top_k_filter(q, top_k)
    return q


class Dream(RuleSampler):
    """Dream ``diffusion_generate`` with ``alg`` origin / maskgit_plus / topk_margin / entropy (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: diffusion steps (or a grid); upstream default 512.
        alg: "origin" (upstream default), "maskgit_plus", "topk_margin" or "entropy".
        alg_temp: 0 / None = top-n by score; > 0 = positions drawn from softmax(score / alg_temp).
        temperature: proposal temperature, 0 = argmax (upstream default 0.0).
        top_p: Dream's nucleus on the proposal (None = off); top_k: keep the k most likely (None = off).
        eps: final time of the grid, in (0, 1) (upstream default 1e-3).
        tie_rule: order of equal scores ("lowest", "highest", "random").
    """

    sampler_name = "dream"
    token_slot = 1  # origin's proposals (its coins use slot 2)

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 512, alg: str = "origin",
                 alg_temp: float | None = None, temperature: float = 0.0, top_p: float | None = None,
                 top_k: int | None = None, eps: float = 1e-3, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps)
        self.alg = checks.choice("alg", alg, ALGS)
        self.alg_temp = checks.optional_real("alg_temp", alg_temp, 0.0)
        ranking_options(self, temperature, tie_rule)
        self.top_p = None if top_p is None else check_top_p(top_p)
        self.top_k = checks.optional_integer("top_k", top_k)
        self.eps = checks.real("eps", eps, 0.0, 1.0, low_open=True, high_open=True)
        self.order = "random" if alg == "origin" else "score"
        self.reads_tokens = alg == "maskgit_plus"
        self.position_temperature = self.alg_temp if alg != "origin" and self.alg_temp else None
        #: entropy / margin: scores computed only where a row-free bound lets them be among the best (identical draws)
        self.use_score_bound = True
        #: with it, tighter bounds from reference rows where a side of the neighbourhood is flat (identical draws)
        self.use_score_envelope = True

    @property
    def name(self) -> str:
        name = f"dream_{self.alg}"
        if self.alg != "origin" and self.alg_temp:
            name += f"_algtemp{self.alg_temp:g}"
        return name if self.alg == "origin" else with_tie_rule(name, self.tie_rule)

    announces_blocks = property(lambda self: self.alg != "origin")

    @property
    def bound(self) -> str | None:
        """At temperature 1 without filters: q(x̂), q_(1) - q_(2) <= max q and the entropy score <= log(max q + 1e-10),
        max q at most max p (1 + 4 V 2^-24) (the float32 row sum's rounding; :meth:`score_bound`)."""
        plain = self.temperature == 1 and (self.top_p is None or self.top_p >= 1) and self.top_k is None
        ok = plain and not self.alg_temp and self.alg != "origin" and (self.reads_tokens or self.use_score_bound)
        return "pmax" if ok else None

    @property
    def envelope(self) -> str | None:
        return self.alg if self.alg in ("entropy", "topk_margin") and self.use_score_envelope else None

    def score_bound(self, pmax: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q_max = (pmax * (1.0 + 4 * self.vocab_size * 2.0**-24)).clamp(max=1.0)
        return torch.log(q_max + 1e-10) + NEGENT_BOUND_SLACK if self.alg == "entropy" else q_max

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return None if self.temperature == 0 else dream_law(probs, self.temperature, self.top_p, self.top_k)

    @law_probability_score(when=lambda rule: rule.alg == "maskgit_plus")  # q(x̂): the engine reads it from the draw
    def score(self, probs: torch.Tensor, tok: torch.Tensor | None, pos: torch.Tensor | None) -> torch.Tensor:
        q = dream_law(probs, self.temperature, self.top_p, self.top_k)
        if self.alg == "maskgit_plus":
            return q.gather(1, tok[:, None]).squeeze(1)  # the proposal's probability under q
        if self.alg == "topk_margin":
            top = torch.topk(q, min(2, q.shape[-1]), dim=-1).values
            return top[:, 0] - (top[:, 1] if q.shape[-1] > 1 else 0.0)
        return torch.log(q + 1e-10).mul_(q).sum(-1)  # sum_v q log(q + 1e-10): minus the entropy

    def counts(self, n: int, steps: int) -> list[int]:
        return dream_schedule(n, steps, self.eps)

    def decode_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """origin: position i unmasks at step j with probability 1 - t_(j+1) / t_j (Stream.TOKEN slot 2 coins)."""
        u = StepUniforms(seed, indices, steps).grid(0, seq_len, slot=2)
        return coin_decode_steps(u, dream_grid(steps, self.eps)[:-1].to(indices.device))

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """One evaluation per step, as upstream (also at a step that commits nothing)."""
        return None if steps is None else float(steps)
