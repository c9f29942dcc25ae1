"""P2's steps with proposals drawn only at masked positions that can be kept (:class:`BoundedPlanning`): the same
samples as the direct step of :func:`~.planning.decode_plan` (P2's), which draws at every masked position
(``tests/test_p2_bounded.py``).

A step keeps the T - m positions with the highest keys k_j = w_j + s G_j (equal keys: the higher position kept, as
the direct step's ``lowest`` masks the lower one first); a masked position that is not kept stays masked and its
proposal is discarded.  Every position keeps its leave-one-out row across steps
(:class:`~dllm_lit.decoding.tracked_rows.TrackedRows`) and from it a log-weight W_j: at a revealed position its
exact weight (eta log p(z_j | z_{-j})), at a masked one the bound max_v log p(v | z) >= log p(x^_j | z) for every
proposal (the same ``log`` of the same numbers: no monotonicity of ``log`` is assumed), so K_j = W_j + s G_j bounds
the key from above (rounding is monotone).  With D the positions whose key is known (revealed and drawn masked
positions, the others at -inf), let t be the (T - m)-th largest of those keys: every undrawn masked position with
K_j < t has a key below T - m known keys, so it is not kept.  The step draws first where K_j reaches the (T - m)-th
largest bound, then wherever K_j >= t, until no undrawn masked position does; the kept set is then the top T - m of
the known keys (ties as the direct step), and the other masked positions stay masked.  Each draw has its own
uniform (keyed by the step and the position), so no other draw moves.  A NaN weight sends the step to the direct
computation (every masked position drawn, the sort's order of NaN).  On the CPU with numba the step runs compiled,
one sequence at a time (:mod:`.p2_kernel`, the same numbers); the torch step is its mirror.
"""
from __future__ import annotations

import torch

from dllm_lit import rng
from dllm_lit.denoisers.hmm_first_order import numba_available
from dllm_lit.util.indices import flat_nonzero
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.decoding.row_providers import LeaveOneOutRows, draw_stored
from dllm_lit.decoding.selection_kernels import lowest

__all__ = ["BoundedPlanning", "GUESS_MARGIN"]

#: the first draws of a step: masked positions whose bound reaches the last step's threshold less this margin
#: (times the Gumbel scale, at least 1); any margin gives the same samples, it only sets how many positions are drawn
GUESS_MARGIN = 0.5


class BoundedPlanning:
    """The rows of one P2 run (module docstring); :meth:`step` makes one step."""

    def __init__(self, sampler, tok_u: StepUniforms, device: torch.device) -> None:
        self.s, self.tok_u, self.M = sampler, tok_u, sampler.mask_id
        self.loo = LeaveOneOutRows(sampler.denoiser, self._derive, device)
        self.guess: torch.Tensor | None = None  # the last step's threshold per sequence

    def _derive(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a step reads of a row: the proposal's cdf (or argmax) and the weights table: log p(v) for the V
        tokens, then their maximum (read by a masked position)."""
        f = {k: v for k, v in self.s.row_features(rows).items() if k != "probs"}
        logp = rows.log()
        f["w"] = torch.cat([logp, logp.amax(-1, keepdim=True)], 1)
        return f

    @staticmethod
    def uniforms(u: StepUniforms, step: int, T: int) -> torch.Tensor:
        """``u.grid(step, T)``, hashed compiled on the CPU with numba (:func:`~.p2_kernel.hash_uniforms`)."""
        if not numba_available():
            return u.grid(step, T)
        from dllm_lit.decoding.p2_kernel import hash_uniforms

        out = torch.empty(u.keys.shape[0], T, dtype=torch.float64)
        hash_uniforms(rng.mix64(u.keys ^ step).numpy(), out.numpy())
        return out

    def _compiled(self, z: torch.Tensor, f: dict[str, torch.Tensor], row: torch.Tensor, i: int, m: int,
                  noise: torch.Tensor | None) -> torch.Tensor | None:
        """The state after the step by :func:`~.p2_kernel.plan_step`; None where a bound is NaN."""
        from dllm_lit.decoding.p2_kernel import plan_step

        B = z.shape[0]
        fresh = self.guess is None
        if fresh:
            self.guess = torch.zeros(B, 1, dtype=torch.float64)
        use_cdf = "cdf" in f
        table = f["cdf"] if use_cdf else f["argmax"]
        h = rng.mix64(self.tok_u.keys ^ (i - 1))
        x0 = z.clone()
        empty = torch.empty(0, 0, dtype=torch.float64)
        ok = plan_step(z.numpy(), row.numpy(), f["w"].view(-1).numpy(), f["w"].shape[1],
                       (empty if noise is None else noise.contiguous()).numpy(),
                       (table if use_cdf else empty).numpy(), (table if not use_cdf else row[:0]).numpy(),
                       use_cdf, h.numpy(), self.M, m, float(self.s.eta),
                       GUESS_MARGIN * max(self.s.gumbel_scale, 1.0), self.guess.view(-1).numpy(), fresh,
                       x0.numpy())
        if not ok and fresh:
            self.guess = None
        return x0 if ok else None

    def step(self, z: torch.Tensor, i: int, m: int, noise: torch.Tensor | None) -> torch.Tensor:
        """The state after step i (1-based) leaving m positions masked; ``noise`` [B, T] = s G (None: s = 0)."""
        B, T = z.shape
        f, row = self.loo.grid(z)
        if z.device.type == "cpu" and numba_available():
            x0 = self._compiled(z, f, row, i, m, noise)
            if x0 is not None:
                return x0
        W = f["w"].view(-1)
        V1 = f["w"].shape[1]  # V + 1: the mask id (V) reads the maximum
        masked = z == self.M
        x0 = z.clone()

        def draw(at: torch.Tensor) -> torch.Tensor:
            """Proposals at the flat positions ``at`` (masked) into x0; their log-weights log p(x^ | z)."""
            slot = row.index_select(0, at)
            b = torch.div(at, T, rounding_mode="floor")
            tok = draw_stored(f, slot, self.tok_u.at_sequences(i - 1, b, at - b * T))
            x0.view(-1)[at] = tok
            return W.index_select(0, slot * V1 + tok)

        if m == 0:
            draw(flat_nonzero(masked))
            return x0
        bound = W.index_select(0, row * V1 + z.view(-1)).view(B, T)  # exact weights, bounds where masked
        eta = self.s.eta
        if eta != 1.0:
            bound = torch.where(masked, bound, 0.0 if eta == 0 else eta * bound)
        if noise is not None:
            bound += noise
        keys = torch.where(masked, -torch.inf, bound)
        width = GUESS_MARGIN * max(self.s.gumbel_scale, 1.0)
        nan = bool(bound.isnan().any())
        if nan:  # the direct computation: every masked position drawn
            cand = masked
        else:
            guess = self.guess
            if guess is None:
                guess = bound.kthvalue(m + 1, dim=1, keepdim=True).values
            cand = masked & (bound >= guess - width)
        undrawn = masked.clone()
        while True:
            at = flat_nonzero(cand)
            w = draw(at)
            keys.view(-1)[at] = w if noise is None else w + noise.view(-1).index_select(0, at)
            if nan:  # NaN keys (only where a bound is NaN) in the sort's order
                return x0.masked_fill_(lowest(keys, m), self.M)
            undrawn.view(-1)[at] = False
            t = keys.kthvalue(m + 1, dim=1, keepdim=True).values  # the (T - m)-th largest known key
            cand = undrawn & (bound >= t)
            if not bool(cand.any()):
                break
        self.guess = t.contiguous()
        low = keys < t  # at most m per sequence: the rest of the m lowest tie at t, lower positions first
        need = m - low.sum(1, keepdim=True)
        if bool((need > 0).any()):
            tie = keys == t
            low |= tie & (tie.cumsum(1) <= need)
        return x0.masked_fill_(low, self.M)
