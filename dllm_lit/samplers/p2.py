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
integers (upstream: a float product truncated).  NFE = S.  An editing rule with ``edit_law = "plan"``: the engine
runs the steps (:func:`dllm_lit.decoding.decode_edits`), on the exact oracle drawing only masked positions that
can be kept.
Randomness: proposals from Stream.TOKEN, Gumbel keys from Stream.ORDER uniforms, both at (step, position).
"""
from __future__ import annotations

from dllm_lit import checks
from dllm_lit.decoding import lowest
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.edit_rule import EditRule

__all__ = ["P2", "masked_after", "lowest"]


def masked_after(seq_len: int, steps: int, step: int) -> int:
    """m_i = floor(T (S - i) / S): positions still masked after step i of S (kappa(t) = t)."""
    return seq_len * (steps - step) // steps


class P2(EditRule):
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
    edit_law = "plan"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, temperature: float = 1.0,
                 eta: float = 1.0, gumbel_scale: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.temperature = checks.real("temperature", temperature, 0.0)
        self.eta = checks.real("eta", eta, 0.0)
        self.gumbel_scale = checks.real("gumbel_scale", gumbel_scale, 0.0)

    @staticmethod
    def masked_after(seq_len: int, steps: int, step: int) -> int:
        """The planning schedule m_i (:func:`masked_after`)."""
        return masked_after(seq_len, steps, step)
