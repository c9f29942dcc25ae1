"""Dream's diffusion sampler and its ``alg`` family (``generation_utils.py``: ``_sample``,
``sample_tokens``); see ``docs/samplers/confidence.md``.

Ye et al., "Dream 7B: Diffusion Large Language Models" (arXiv:2508.15487).  Upstream: HKUNLP/Dream
(the model's ``generation_utils.py``; a copy is in NVlabs/Fast-dLLM ``dream/model/generation_utils.py``).

Grid t_j = linspace(1, eps, steps + 1) (float32, as upstream); step j goes t = t_j -> s = t_{j+1}.
The proposal law at a masked position is q = softmax(log p / tau) (p itself at tau = 0), restricted
to Dream's top-p (the token crossing p is kept) and top-k sets and renormalised; the proposal is a
draw from q (tau > 0) or argmax q (tau = 0).

* ``origin``: every masked position is revealed with probability 1 - s/t (1 at the last step)
  with its proposal - MDLM-like.  Which positions reveal does not depend on the tokens, so each
  position's step is drawn up front (:func:`~dllm_lit.decoding.ordered_decoding.coin_decode_steps`)
  and only the revealed positions are queried (:func:`decode_in_order`).
* ``maskgit_plus`` / ``topk_margin`` / ``entropy``: n = floor(#mask (1 - s/t)) positions
  (all remaining at the last step) commit, the n best by score q(x̂), q_(1) - q_(2), or
  sum_v q_v log(q_v + 1e-10) (a negative entropy); with ``alg_temp`` > 0 the n positions are drawn
  without replacement from softmax(score / alg_temp) (Gumbel top-k, the law of upstream's
  ``torch.multinomial``).  The counts are the same in every sequence, so they are computed up front,
  in float32 as upstream.

Dream's network is initialised from an autoregressive model, so upstream shifts its logits by one
position (``logits = cat([logits[:, :1], logits[:, :-1]])``): the prediction for position i is read
at i - 1.  That is a property of the network's output layout; the oracle returns p(x0_i | z) at i
directly, so there is nothing to shift.
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import (NeighbourhoodRows, ReferenceScoreBounds, coin_decode_steps, decode_blocks,
                               decode_in_order, has_max_prob_bound, propose_tokens, ranking_options, with_tie_rule)
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.oracle import OracleDenoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical_from_cdf, sharpen
from dllm_lit.samplers.nucleus import check_top_p, top_k_filter, top_p_filter

__all__ = ["Dream", "ALGS", "dream_grid", "dream_schedule", "dream_law"]

ALGS = ("origin", "maskgit_plus", "topk_margin", "entropy")
#: Stream.ORDER slot of the Gumbel keys that draw positions when alg_temp > 0
GUMBEL_SLOT = 2
#: absolute slack added to the entropy score's bound log(u + 1e-10): covers the float64 sum's rounding over V terms
#: (at most about V 2^-53 * 23.1) and a row sum 1 - O(V 2^-53) of the normalised law, both below 1e-10 for V < 2^30
NEGENT_BOUND_SLACK = 1e-6


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


class Dream(Sampler):
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

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 512, alg: str = "origin",
                 alg_temp: float | None = None, temperature: float = 0.0, top_p: float | None = None,
                 top_k: int | None = None, eps: float = 1e-3, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.alg = checks.choice("alg", alg, ALGS)
        self.alg_temp = checks.optional_real("alg_temp", alg_temp, 0.0)
        ranking_options(self, temperature, tie_rule)
        self.top_p = None if top_p is None else check_top_p(top_p)
        self.top_k = checks.optional_integer("top_k", top_k)
        self.eps = checks.real("eps", eps, 0.0, 1.0, low_open=True, high_open=True)
        #: entropy / margin scores computed only where a row-free bound lets them be among the best (identical draws)
        self.use_score_bound = True
        #: with it, tighter bounds from reference rows where a side of the neighbourhood is flat (identical draws)
        self.use_score_envelope = True

    @property
    def name(self) -> str:
        name = f"dream_{self.alg}"
        if self.alg != "origin" and self.alg_temp:
            name += f"_algtemp{self.alg_temp:g}"
        return name if self.alg == "origin" else with_tie_rule(name, self.tie_rule)

    def _law(self, probs: torch.Tensor) -> torch.Tensor:
        return dream_law(probs, self.temperature, self.top_p, self.top_k)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        B, T, dev = indices.numel(), seq_len, indices.device
        x = torch.full((B, T), self.mask_id, dtype=torch.long, device=dev)
        tok_u = StepUniforms(seed, indices, steps)
        tau = self.temperature
        if self.alg == "origin":
            decode = coin_decode_steps(tok_u.grid(0, T, slot=2), dream_grid(steps, self.eps)[:-1].to(dev))

            def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
                q = self._law(probs)
                return q.argmax(-1) if tau == 0 else categorical_from_cdf(q.cumsum(-1), tok_u.at(j, b, p, slot=1))

            return decode_in_order(self.denoiser, x, decode, steps - 1, draw)

        alg, V = self.alg, self.vocab_size
        # entropy and margin under tau = 1 without filters or alg_temp, over a denoiser that bounds max p without rows
        # and whose rows are not memoised by key (large key ranges, e.g. V = 4096): q_(1) - q_(2) <= max q and
        # sum_v q_v log(q_v + 1e-10) <= log(max q + 1e-10), so scores are computed only where the bound reaches
        # the k-th score found (pruned positions score strictly below it and are never committed, whatever the tie
        # rule); with memoised rows the slot-wise dense ranking is cheaper
        ranked_bounded = (alg in ("entropy", "topk_margin") and tau == 1 and (self.top_p is None or self.top_p >= 1)
                          and self.top_k is None and not self.alg_temp and self.use_score_bound
                          and has_max_prob_bound(self.denoiser) and not NeighbourhoodRows.applies(self.denoiser))
        # entropy and margin read the posterior only: positions are ranked first and proposals drawn where they
        # commit, from rows recomputed there (the cache keeps no [V] rows: "probs" is recomputed where read)
        by_feature = alg != "maskgit_plus"
        # maskgit_plus at temperature 1 without filters or alg_temp: q(x̂) <= max q, and max q exceeds max p by at
        # most the float32 row sum's rounding (q = p / sum p in float64): proposals drawn only where the score can
        # be among the k best, as LLaDA's confidences
        bounded = not by_feature and tau == 1 and (self.top_p is None or self.top_p >= 1) and self.top_k is None \
            and not self.alg_temp
        row_sum_slack = 1.0 + 4 * V * 2.0**-24

        def score_bound(b: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            """Upper bounds of the score from bounds b >= max p: max q <= b (1 + 4 V 2^-24), then the margin's or
            the entropy score's bound (see ``ranked_bounded``)."""
            q_max = (b * row_sum_slack).clamp(max=1.0)
            return torch.log(q_max + 1e-10) + NEGENT_BOUND_SLACK if alg == "entropy" else q_max

        if ranked_bounded and self.use_score_envelope and isinstance(self.denoiser, OracleDenoiser):
            # and, where one side of a position's neighbourhood is flat, the bound of its reference row (far tighter
            # for the entropy: positions far from revealed tokens score about -H(pi), not log max q)
            score_bound.from_neighbours = ReferenceScoreBounds(self.denoiser, alg, NEGENT_BOUND_SLACK)

        def rank_feature(q: torch.Tensor) -> torch.Tensor:
            """The margin q_(1) - q_(2) or sum_v q_v log(q_v + 1e-10) of law rows q (float64)."""
            if alg == "topk_margin":
                top = torch.topk(q, min(2, V), dim=-1).values
                return top[:, 0] - (top[:, 1] if V > 1 else 0.0)
            return torch.log(q + 1e-10).mul_(q).sum(-1)  # (q * log(q + 1e-10)).sum(-1), in place

        def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
            q = self._law(probs)
            out = {"argmax": q.argmax(-1)} if tau == 0 else {}  # read by temperature-0 proposals only
            if by_feature or bounded:
                out["probs"] = probs
            if bounded or ranked_bounded:
                out["pmax"] = probs.amax(-1)
            elif not by_feature and tau != 0:
                out["cdf"] = q.cumsum(-1)
            if alg == "maskgit_plus":
                out["q"] = q
            else:
                out["margin" if alg == "topk_margin" else "negent"] = rank_feature(q)
            return out

        widths = {"argmax": ((), torch.int64)} if tau == 0 else {}
        if by_feature or bounded:
            widths["probs"] = ((V,), None)
        if bounded or ranked_bounded:
            widths["pmax"] = ((), None)
        elif not by_feature and tau != 0:
            widths["cdf"] = ((V,), torch.float64)
        widths.update({"maskgit_plus": {} if bounded else {"q": ((V,), torch.float64)},
                       "topk_margin": {"margin": ((), torch.float64)}, "entropy": {"negent": ((), torch.float64)}}[alg])
        gumbel_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
        alg_temp = self.alg_temp

        def score(view) -> torch.Tensor:
            if alg == "maskgit_plus":
                s = view.tok_prob if bounded else view.get("q", view.tok)
            elif ranked_bounded:  # the cache keeps bounds only: the same feature of the rows recomputed here
                s = view.row_feature(lambda rows: rank_feature(self._law(rows)))
            else:
                s = view.get("margin" if alg == "topk_margin" else "negent")
            if alg_temp:  # Gumbel top-k = sampling without replacement from softmax(s / alg_temp)
                u = view.uniforms(gumbel_u, slot=GUMBEL_SLOT)
                s = s / alg_temp - torch.log(-torch.log(u))
            return s

        def propose(view) -> torch.Tensor:
            if not (by_feature or bounded) or tau == 0:
                return propose_tokens(view, tau, tok_u)
            u = view.uniforms(tok_u)
            if view.post.draws_law:  # the cache's rows, drawn by the float64 cdf of q: the stored-cdf draw
                tok, view.tok_prob = view.post.draw_law(view, u)  # with law_scores: q(x̂)
                return tok
            q = self._law(view.get("probs"))
            tok = categorical_from_cdf(q.cumsum(-1), u)
            view.tok_prob = q.gather(1, tok[:, None]).squeeze(1)
            return tok

        decode_blocks(self.denoiser, x, [(0, T)], features=features, widths=widths, propose=propose, score=score,
                      tie_rule=self.tie_rule, tie_u=StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER),
                      schedule=[dream_schedule(T, steps, self.eps)], use_cache=self.use_cache,
                      fresh=("probs",) if by_feature or bounded else (),
                      law=self._law if (by_feature or bounded) and tau != 0 else None, score_reads_tokens=not by_feature,
                      bound="pmax" if bounded or ranked_bounded else None, law_scores=bounded,
                      score_bound=score_bound if bounded or ranked_bounded else None)
        return x
