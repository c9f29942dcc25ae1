"""The sampler the paper's tables call "MDLM" (paper-reference-code.md Sec. 3).

The paper ran LLaDA's ``generate()`` with ``remasking='random'``, temperature 1 and one block
covering the sequence - not MDLM's own ddpm_cache sampler (:class:`dllm_lit.samplers.mdlm.MDLM`).
With n = T masked positions and S = steps, step i commits exactly

    k_i = T // S + [i < T % S]

positions chosen uniformly at random among the still-masked ones, each taking a token drawn
(temperature 1) from its own marginal p(x0_l | z); committed tokens never change and there is
no final step.  With steps = T (one position per step) this is exact sequential sampling of
the conditionals in a random order, so its output law is the chain's law.

Implemented as :class:`dllm_lit.samplers.llada.LLaDA` with those options fixed: the random
subsets are drawn as one uniformly random order of the positions consumed k_i at a time (the
same law), and the denoiser is queried only at the k_i committed positions (O(k V) per step).
"""
from __future__ import annotations

from dllm_lit.samplers.llada import LLaDA

__all__ = ["MDLMPaper"]


class MDLMPaper(LLaDA):
    """LLaDA generate() with remasking='random', temperature 1, one block (the paper's "MDLM").

    Args:
        denoiser: frozen denoiser (oracle built from the data module's chain if None).
        steps: sampling steps (or a grid); T / steps positions are committed per step.
        ar_baseline: also emit exact chain samples.
    """

    sampler_name = "mdlm_paper"

    def __init__(self, denoiser=None, steps: int | list[int] = 128, ar_baseline: bool = True) -> None:
        super().__init__(denoiser=denoiser, steps=steps, ar_baseline=ar_baseline,
                         remasking="random", temperature=1.0, block_length=None)
