"""P2 path planning: every step re-plans which positions stay masked, revealed ones included; see
``docs/samplers/p2.md``.

Peng et al., "Path Planning for Masked Diffusion Model Sampling" (arXiv:2502.03540); followed in
pengzhangzhi/Path-Planning ``src/path_planning/p2.py`` (``p2_sampling``) and ``score_function.py`` (``logP``).

Step i = 1..S (one denoiser call each), with m_i = floor(T (S - i) / S) positions left masked after it
(upstream's kappa(t) = t):

* masked j: a proposal x^_j ~ p(x_j | z)^(1/tau) (argmax at tau = 0), weight w_j = log p(x^_j | z);
* revealed j: its token, weight w_j = eta log p(z_j | z_{-j}), the leave-one-out probability (the self-planner);
* keys k_j = w_j + s G_j, G_j standard Gumbel; the m_i positions with the lowest keys become (or stay) MASK,
  every other masked position takes its proposal, every other revealed one keeps its token.

The kept set is the top (T - m_i) of Gumbel-perturbed log-weights, i.e. a Plackett-Luce draw without replacement
with weights exp(w_j / s) (s = ``gumbel_scale``; s = 0: the deterministic lowest keys, ties to the lower position).

Departures: upstream's score is the log-softmax of the Gumbel-perturbed logits at their argmax (the token draw and
the planner share one noise), without a planner it scores revealed positions by a fresh proposal, and its planner is
fed the proposal sequence (no MASK); here the token draw and the position draw use separate uniforms and revealed
positions are scored by the leave-one-out probability of the token they hold given z, MASKs included.  m_i in
integers (upstream: a float product truncated).  NFE = S.
Randomness: proposals from Stream.TOKEN, Gumbel keys from Stream.ORDER uniforms, both at (step, position).
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import BoundedPlanning, LeaveOneOutRows, check_leave_one_out, draw_stored
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import flat_nonzero
from dllm_lit.samplers.base import NFECountingSampler
from dllm_lit.samplers.draws import StepUniforms, tempered_law
from dllm_lit.samplers.wino import stable_ranks

__all__ = ["P2", "masked_after", "lowest"]


def masked_after(seq_len: int, steps: int, step: int) -> int:
    """m_i = floor(T (S - i) / S): positions still masked after step i of S (kappa(t) = t)."""
    return seq_len * (steps - step) // steps


def lowest(w: torch.Tensor, m: int) -> torch.Tensor:
    """Bool [B, T]: the m lowest entries of each row of w, ties to the lower position - ``stable_ranks(w) < m`` by a
    selection (``kthvalue``) instead of a sort (about 4x faster at T = 1024); rows holding NaN take the sort."""
    if bool(w.isnan().any()):
        return stable_ranks(w, descending=False) < m
    kth = w.kthvalue(m, dim=1, keepdim=True).values
    below, tie = w < kth, w == kth
    return below | (tie & (tie.cumsum(1) <= m - below.sum(1, keepdim=True)))


class P2(NFECountingSampler):
    """Path planning: propose every masked token, then re-plan the whole masked set by Gumbel-perturbed log-weights.

    Args:
        denoiser: frozen denoiser answering leave-one-out posteriors (None: the world's exact oracle).
        steps: number of calls S, or a grid.
        temperature: proposal temperature tau (upstream default 1).
        eta: factor on revealed positions' log-weights (upstream ``eta``, default 1; 0 = revealed tokens weigh as
            much as certain proposals, so they are rarely re-masked).
        gumbel_scale: scale s of the Gumbel noise on the keys (upstream's ``noise_scale``, 1); 0 = deterministic.
    """

    sampler_name = "p2"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, temperature: float = 1.0,
                 eta: float = 1.0, gumbel_scale: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.temperature = checks.real("temperature", temperature, 0.0)
        self.eta = checks.real("eta", eta, 0.0)
        self.gumbel_scale = checks.real("gumbel_scale", gumbel_scale, 0.0)

    def check_options(self) -> None:
        check_leave_one_out(self.denoiser, "P2")

    def row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a step reads of a float64 row: the row, and the proposal's cdf (or the argmax at tau = 0)."""
        law = tempered_law(rows, self.temperature)
        return {"probs": rows, "argmax": rows.argmax(-1)} if law is None else {"probs": rows, "cdf": law.cumsum(-1)}

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int, cache: bool = True):
        """Samples and NFE; ``cache=False`` computes every step's rows afresh (identical draws, tested).  Where the
        engine memoises rows by neighbourhood key (the exact oracle on the CPU) a step draws only at masked
        positions that can be kept (:mod:`.p2_bounded`: the same draws, tested)."""
        B, T, S, M, dev = indices.numel(), seq_len, steps, self.mask_id, indices.device
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        b = torch.arange(B, device=dev).repeat_interleave(T)
        p = torch.arange(T, device=dev).repeat(B)
        tok_u = StepUniforms(seed, indices, steps)
        key_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
        memo = LeaveOneOutRows.provider_for(self.denoiser, dev, cache) == "memo"
        bounded = BoundedPlanning(self, tok_u, dev) if memo else None
        loo = None if memo else LeaveOneOutRows(self.denoiser, self.row_features, dev, cache=cache)
        for i in range(1, S + 1):
            m = masked_after(T, S, i)
            noise = None
            if m > 0 and self.gumbel_scale > 0:
                noise = key_u.grid(i - 1, T).log_().neg_().log_().neg_()  # G = -log(-log u), in place
                if self.gumbel_scale != 1.0:
                    noise.mul_(self.gumbel_scale)
            if bounded is not None:
                z = bounded.step(z, i, m, noise)
                continue
            feat, row = loo.rows(z, b, p)                                                    # row of each of B T
            masked = z == M
            x0 = z.clone()
            at = flat_nonzero(masked)
            x0.view(-1)[at] = draw_stored(feat, row[at], tok_u.at(i - 1, b[at], p[at]))
            w = feat["probs"][row, x0.view(-1)].view(B, T).log()
            if self.eta != 1.0:  # eta = 0 leaves revealed weights at 0 (also where the probability is 0)
                w = torch.where(masked, w, 0.0 if self.eta == 0 else self.eta * w)
            if m > 0:
                z = torch.where(lowest(w if noise is None else w + noise, m), M, x0)
            else:
                z = x0
        return z, torch.full((B,), float(S), dtype=torch.float64, device=dev)
