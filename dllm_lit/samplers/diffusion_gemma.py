"""DiffusionGemma-style entropy-bounded renoising on uniform-state noise with the exact oracle; see
``docs/samplers/diffusion_gemma.md``.

Upstream: ZHZisZZ/dllm ``dllm/pipelines/diffusiongemma/sampler.py`` (``DiffusionGemmaSampler._denoising_step``,
the released checkpoint's sampler) and diffusers ``schedulers/scheduling_entropy_bound.py``
(``EntropyBoundScheduler.step``) driven by ``pipelines/diffusion_gemma/pipeline_diffusion_gemma.py``.  The
acceptance rule is the EB-sampler's (Ben-Hamu et al., "Accelerated Sampling from Masked Diffusion Models via
Entropy Bounded Unmasking", arXiv:2505.24857) applied to a canvas without a mask token.

The canvas z starts as uniform tokens.  Call k = 0..S-1 (S = ``steps``, upstream ``max_denoising_steps``):

1. every position gets q_i = p(x_i | z_{-i}) under UniformNoise(alpha), alpha = m / T with m the number of
   positions the previous call accepted (0 at the first call): the evidence channel of a time-free model trained
   on uniform replacement, read at the level the canvas carries (the docs page gives the reason);
2. temperature tau_k = t_min + (t_max - t_min) (S - k) / S; p_i = q_i^(1/tau_k) normalised, H_i = H(p_i);
3. positions sorted by H ascending (H rounded to 9 decimals, ties by ``tie_rule``); the j-th is accepted iff the
   entropies before it sum to at most ``entropy_bound`` (the first always is);
4. accepted positions take a draw from p_i, all others a fresh uniform token (renoising): z <- that canvas;
5. early stop (``output`` "argmax", upstream dllm): the sequence is done when argmax p equals the argmax of each
   of the previous ``stability_threshold`` calls and the mean of H is below ``entropy_threshold``.

Output: "argmax" (upstream dllm) the argmax canvas of the last call; "canvas" (the diffusers 0.42 pipeline) the
argmax canvas of a sequence that stopped, the last canvas (renoised positions included) of one that ran every call.
NFE = the calls a sequence took part in (adaptive with early stop).
Uniforms: start canvas at slot 3 of step 0; call k draws at slot 0 of step k, renoise tokens at slot 3 of
step k + 1; random tie keys from Stream.ORDER at step k.
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import TIE_SLOT, posterior_entropy
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import UniformNoise
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, sharpen
from dllm_lit.samplers.eb_sampler import entropy_bound_count
from dllm_lit.samplers.selection import TIE_RULES, rank_positions
from dllm_lit.samplers.uniform_state import check_channel, draw_rows, leave_one_out_chunks, uniform_prior

__all__ = ["DiffusionGemma", "OUTPUTS", "ENTROPY_DECIMALS", "renoise_temperature", "accepted_mask"]

#: what a run returns: the last call's argmax canvas (ZHZisZZ/dllm), or diffusers' (the argmax canvas once stopped,
#: else the last canvas)
OUTPUTS = ("argmax", "canvas")
#: entropies are ranked and bounded after rounding to this many decimals, so that mathematically equal entropies
#: (symmetric positions of the exact oracle) tie exactly and the tie rule, not float noise, orders them
ENTROPY_DECIMALS = 9


def renoise_temperature(k: int, steps: int, t_max: float, t_min: float) -> float:
    """tau of call k = 0..steps-1: t_min + (t_max - t_min) (steps - k) / steps (upstream's annealing)."""
    return t_min + (t_max - t_min) * (steps - k) / steps


def accepted_mask(entropy: torch.Tensor, bound: float, tie_rule: str, tie_keys: torch.Tensor | None) -> torch.Tensor:
    """Bool [B, T]: the positions whose entropy-ascending predecessors sum to at most ``bound`` (at least one per row),
    entropies [B, T] rounded to :data:`ENTROPY_DECIMALS` first."""
    h = torch.round(entropy.to(torch.float64), decimals=ENTROPY_DECIMALS)
    order = rank_positions(-h, tie_rule, tie_keys)
    count = entropy_bound_count(-h.gather(1, order), bound)
    take = torch.arange(h.shape[1], device=h.device)[None, :] < count[:, None]
    return torch.zeros_like(take).scatter_(1, order, take)


class DiffusionGemma(Sampler):
    """Entropy-bounded renoising of a uniform-noise canvas (module docstring).

    Args:
        denoiser: frozen denoiser answering UniformNoise leave-one-out (the exact oracle if None).
        steps: calls per sequence at most (upstream ``max_denoising_steps`` 48 / ``num_inference_steps``), or a grid.
        entropy_bound: entropy budget of the accepted set beyond its largest term (upstream 0.1).
        t_max, t_min: temperature of the first call and the limit of the last (upstream 0.8, 0.4).
        entropy_threshold: early stop when the mean entropy falls below it (upstream 0.005; 0 never stops).
        stability_threshold: calls the argmax canvas must repeat before a stop (upstream 1; 0: no condition).
        output: "argmax" (upstream dllm: the last argmax canvas) or "canvas" (the diffusers 0.42 pipeline: the
            argmax canvas of a stopped sequence, else the last canvas; ``entropy_threshold`` 0 never stops).
        tie_rule: order of equal entropies ("lowest", "highest", "random"); upstream's ``torch.sort`` leaves it open.
    """

    sampler_name = "diffusion_gemma"
    no_log_q_reason = "renoising has no unmasking order: every position is redrawn or renoised at every call"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 48, entropy_bound: float = 0.1,
                 t_max: float = 0.8, t_min: float = 0.4, entropy_threshold: float = 0.005,
                 stability_threshold: int = 1, output: str = "argmax", tie_rule: str = "lowest") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.entropy_bound = checks.real("entropy_bound", entropy_bound, 0.0)
        self.t_max = checks.real("t_max", t_max, 0.0, low_open=True)
        self.t_min = checks.real("t_min", t_min, 0.0, low_open=True)
        self.entropy_threshold = checks.real("entropy_threshold", entropy_threshold, 0.0)
        self.stability_threshold = checks.integer("stability_threshold", stability_threshold, 0)
        self.output = checks.choice("output", output, OUTPUTS)
        self.tie_rule = checks.choice("tie_rule", tie_rule, TIE_RULES)

    def check_options(self) -> None:
        check_channel(self.denoiser, UniformNoise(0.5))

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int,
                          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples and the calls each sequence took part in."""
        B, T, V, dev = indices.numel(), seq_len, self.vocab_size, indices.device
        uni = StepUniforms(seed, indices, steps)
        tie_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER) if self.tie_rule == "random" else None
        z = uniform_prior(uni, 0, B, T, V).to(dev)
        best = torch.full((B, T), -1, dtype=torch.long, device=dev)  # the last call's argmax canvas
        history = torch.full((self.stability_threshold, B, T), -1, dtype=torch.long, device=dev)
        accepted = torch.zeros(B, dtype=torch.long, device=dev)  # m: positions the previous call accepted
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        nfe = torch.zeros(B, dtype=torch.float64, device=dev)
        for k in range(steps):
            tau = renoise_temperature(k, steps, self.t_max, self.t_min)
            u_tok, noise = uni.grid(k, T), uniform_prior(uni, k + 1, B, T, V).to(dev)
            keys = tie_u.grid(k, T, slot=TIE_SLOT) if tie_u is not None else None
            active, level = ~done, accepted.clone()
            for m in torch.unique(level[active]).tolist():
                rows = torch.nonzero(active & (level == m)).flatten()
                for sl, q in leave_one_out_chunks(self.denoiser, z[rows], UniformNoise(m / T)):
                    r = rows[sl]  # every operation below is row-wise: the numbers of all rows at once
                    law = sharpen(q, 1.0 / tau)
                    law = law / law.sum(-1, keepdim=True)
                    H = posterior_entropy(law)
                    take = accepted_mask(H, self.entropy_bound, self.tie_rule, None if keys is None else keys[r])
                    z[r] = torch.where(take, draw_rows(law, u_tok[r]), noise[r])
                    arg = law.argmax(-1)
                    stable = (history[:, r] == arg[None]).all(-1).all(0)
                    if self.stability_threshold:
                        history[:, r] = torch.cat([history[1:, r], arg[None]])
                    best[r], accepted[r] = arg, take.sum(1)
                    nfe[r] += 1
                    done[r] = stable & (H.mean(1) < self.entropy_threshold)
            if bool(done.all()):
                break
        # diffusers commits a stopped sequence's argmax canvas (``canvas = where(finished, argmax_canvas, canvas)``)
        return (best if self.output == "argmax" else torch.where(done[:, None], best, z)), nfe
