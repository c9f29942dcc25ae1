"""ReMDM remasking samplers (cap, rescale, conf, loop); see ``docs/samplers/remdm.md``.

Schedule. Upstream ReMDM (and the paper's runs) use the *linear* schedule alpha_t = 1 - t on the grid ``t_j =
linspace(1, t_min, steps + 1)`` (t_min = 1e-5), s = t_{j+1}; ``schedule`` only accepts ``"linear"``. Internally
everything is written with the move chance m = 1 - alpha (m_t = t for the linear schedule), which keeps the sigma =
0 kernel bit-identical to MDLM's.

Generic kernel (ReMDM Eq. 6) with remasking probability sigma:

    unmasked position:  keep w.p. 1 - sigma, remask w.p. sigma (a token never switches);
    masked position:    P(v)    = p_v (alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t)
                                = p_v (m_t - m_s + sigma alpha_t) / m_t,
                        P(MASK) = (1 - alpha_s - sigma alpha_t) / (1 - alpha_t)
                                = (m_s - sigma alpha_t) / m_t,

valid for 0 <= sigma <= sigma_max = min(1, (1 - alpha_s) / alpha_t).  p = p(x0 | z_t) after
nucleus filtering (``top_p``, :mod:`dllm_lit.decoding.nucleus`) at every decoded position.

Variants (``variant``):

* ``cap``:     sigma = min(eta, sigma_max)            (upstream default eta = 0.008)
* ``rescale``: sigma = eta * sigma_max                (upstream default eta = 0.015)
* ``conf``: per-position sigma_i = eta_i * sigma_max, eta_i = softmax_i(conf) over the UNMASKED positions
  (0 at masked positions, which follow the MDLM kernel); conf_i = -psi_i, psi_i the nucleus-filtered probability
  of the token drawn at i, frozen at decode time; remasked positions get conf = -inf, so low-confidence tokens are
  remasked more often (expected remasks per step = sigma_max).  Upstream has no eta for conf; the optional
  ``eta_cap`` replaces sigma_max by min(eta_cap, sigma_max) (the paper's conf-with-cap; default None = upstream).
  Upstream's softmax is bfloat16; here it is float64 (a deliberate precision fix).
* ``loop`` (t_on, t_off, alpha_on, eta; upstream 0.55, 0.05, 0.9, 0.02):
  t > t_on: MDLM step on alpha(t) = (1 - t) alpha_on / (1 - t_on);
  t_off < t <= t_on: generic kernel with alpha_t = alpha_s = alpha_on and
  sigma = min(eta, sigma_max) (= eta whenever eta <= (1 - alpha_on)/alpha_on, e.g. the paper's
  settings; the cap is the paper's App. formula and keeps the kernel valid otherwise);
  t <= t_off: MDLM step on alpha(t) = 1 - t (1 - alpha_on) / t_off.
  When a coarse grid makes alpha(s) > 1 in the first phase, alpha(s) is clamped to 1 (every masked position
  unmasks) - the law upstream's exponential race gives to the negative MASK weight.

After the last step every remaining MASK is filled with argmax_v p(x0 = v | z) (no nucleus), as upstream.

Efficiency and randomness. Neither the remask decision nor the unmask decision depends on the denoiser's token
distribution, so each step first decides, with one uniform per position, which masked positions unmask (stream
TOKEN, slot 0 - the same uniforms as :class:`MDLM`) and which unmasked positions are remasked (stream REMASK, slot
0), then queries the denoiser only at the k unmasking positions (O(k V): :class:`~dllm_lit.decoding.NucleusDraws`)
and draws their tokens by the float64 inverse CDF (stream TOKEN, slot 1, as MDLM). Hence with sigma = 0 and
``top_p = 1`` (cap/rescale with eta = 0) ReMDM reproduces ``MDLM(decoding="stepwise")`` draw for draw (MDLM's default
"ordered" decoding has the same law but other draws). A step costs O(B T) for the decisions (as stepwise MDLM) plus
O(k V) for the k decoded positions; conf adds an O(B T) weight sum.
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import NucleusDraws
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, argmax_fill
from dllm_lit.samplers.schedules import time_grid

__all__ = ["ReMDM", "VARIANTS", "DEFAULT_ETA"]

VARIANTS = ("conf", "loop", "cap", "rescale")
#: upstream script defaults (T = 1024, 1024 steps)
DEFAULT_ETA = {"cap": 0.008, "rescale": 0.015, "loop": 0.02}
SCHEDULES = ("linear",)


def sigma_max(m_t: float, m_s: float) -> float:
    """min(1, (1 - alpha_s) / alpha_t) with move chances m = 1 - alpha (1 when alpha_t = 0)."""
    a_t = 1.0 - m_t
    return 1.0 if m_s >= a_t else m_s / a_t


class ReMDM(Sampler):
    """ReMDM sampler with the exact oracle (or any) denoiser; see the module docstring.

    Args:
        denoiser, steps: as :class:`Sampler`.
        variant: "conf", "loop", "cap" or "rescale".
        eta: remasking parameter of cap / rescale / loop, in [0, 1]; None = upstream default
            (cap 0.008, rescale 0.015, loop 0.02).  Not used by conf (must be None).
        eta_cap: conf only: cap on the per-step remasking budget, sigma = min(eta_cap, sigma_max);
            None (default, upstream) = sigma_max.
        t_on, t_off, alpha_on: loop window and plateau (0 < t_off < t_on < 1, 0 < alpha_on < 1).
        top_p: nucleus mass in (0, 1]; 1 = no filtering.
        schedule: "linear" (alpha_t = 1 - t), the only schedule upstream ReMDM uses.
        t_min: end of the time grid (upstream 1e-5).
    """

    no_log_q_reason = "committed tokens are remasked and redrawn, so a sample is not one draw per position"

    def __init__(
        self,
        denoiser: Denoiser | None = None,
        steps: int | list[int] = 128,
        variant: str = "conf",
        eta: float | None = None,
        eta_cap: float | None = None,
        t_on: float = 0.55,
        t_off: float = 0.05,
        alpha_on: float = 0.9,
        top_p: float = 0.9,
        schedule: str = "linear",
        t_min: float = 1e-5,
    ) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.variant = checks.choice("variant", variant, VARIANTS)
        self.sampler_name = f"remdm_{variant}"
        if eta is not None and variant == "conf":
            raise ValueError("eta is not used by variant 'conf' (upstream has none); leave it None or use eta_cap")
        if eta_cap is not None and variant != "conf":
            raise ValueError(f"eta_cap is only used by variant 'conf', not {variant!r}; use eta")
        self.eta = DEFAULT_ETA.get(variant, 0.0) if eta is None else eta
        self.eta_cap = eta_cap
        self.t_on, self.t_off, self.alpha_on = t_on, t_off, alpha_on
        self.top_p = top_p
        self.schedule = schedule
        self.t_min = t_min
        self.check_options()

    def check_options(self) -> None:
        """Raise ValueError naming the offending field (at construction and again at wiring)."""
        checks.choice("variant", self.variant, VARIANTS)
        checks.real("eta", self.eta, 0.0, 1.0)
        checks.optional_real("eta_cap", self.eta_cap, 0.0, 1.0)
        checks.real("t_on", self.t_on, 0.0, 1.0, low_open=True, high_open=True)
        checks.real("t_off", self.t_off, 0.0, 1.0, low_open=True, high_open=True)
        if self.t_off >= self.t_on:
            raise ValueError(f"t_off must be smaller than t_on, got t_off={self.t_off!r} >= t_on={self.t_on!r}")
        checks.real("alpha_on", self.alpha_on, 0.0, 1.0, low_open=True, high_open=True)
        checks.probability("top_p", self.top_p)
        checks.choice("schedule", self.schedule, SCHEDULES)
        checks.real("t_min", self.t_min, 0.0, 1.0, low_open=True, high_open=True)

    # ------------------------------------------------------------------ schedule
    def step_rates(self, t: float, s: float) -> tuple[float, float, float]:
        """(m_t, m_s, sigma) of the step t -> s; for conf sigma is the budget multiplying eta_i."""
        if self.variant == "loop":
            if t > self.t_on:
                k = self.alpha_on / (1.0 - self.t_on)
                return 1.0 - (1.0 - t) * k, max(0.0, 1.0 - (1.0 - s) * k), 0.0
            if t > self.t_off:
                m = 1.0 - self.alpha_on
                return m, m, min(self.eta, sigma_max(m, m))
            k = (1.0 - self.alpha_on) / self.t_off
            return t * k, s * k, 0.0
        m_t, m_s = t, s  # linear: alpha = 1 - t
        smax = sigma_max(m_t, m_s)
        if self.variant == "cap":
            return m_t, m_s, min(self.eta, smax)
        if self.variant == "rescale":
            return m_t, m_s, self.eta * smax
        return m_t, m_s, smax if self.eta_cap is None else min(self.eta_cap, smax)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """steps + 1: upstream calls the model at every step (remasking can change any state) and for the final fill."""
        return float(steps + 1)

    # ------------------------------------------------------------------ sampling
    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        B, T, M = indices.numel(), seq_len, self.mask_id
        dev = indices.device
        conf_variant = self.variant == "conf"
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        uni = StepUniforms(seed, indices, steps)
        rem = StepUniforms(seed, indices, steps, stream=rng.Stream.REMASK)
        # conf: softmax weights exp(conf_i) = exp(-psi_i), stored at decode time (0 while masked)
        weight = torch.zeros((B, T), dtype=torch.float64, device=dev) if conf_variant else None
        draws = NucleusDraws(self.denoiser, self.top_p, conf_variant, dev)
        ts = time_grid(steps, self.t_min).tolist()
        for j in range(steps):
            m_t, m_s, sig = self.step_rates(ts[j], ts[j + 1])
            masked = z == M
            # one uniform per position: Stream.TOKEN where masked, Stream.REMASK where not.  Masked positions
            # unmask w.p. (m_t - m_s + sigma alpha_t) / m_t (sigma = 0 for conf); unmasked ones are remasked w.p.
            # sigma (conf: sigma eta_i = weight_i scale, weight_i <= 1, so only where u < scale: candidates)
            sig_masked = 0.0 if conf_variant else sig
            scale = sig / weight.sum(-1, keepdim=True).clamp_min(1e-300) if conf_variant and sig > 0.0 else None
            fire = uni.below_where(rem, masked, j, (m_t - m_s + sig_masked * (1.0 - m_t)) / m_t,
                                   scale if scale is not None else sig)
            b, p = nonzero_pairs(fire)
            at_masked = masked[b, p]
            rb, rp = b[~at_masked], p[~at_masked]  # remasked (conf: candidates)
            b, p = b[at_masked], p[at_masked]  # unmasked
            if scale is not None and rb.numel():
                keep = rem.at(j, rb, rp) < weight[rb, rp] * scale[rb, 0]
                rb, rp = rb[keep], rp[keep]
            if b.numel():  # conditioned on z_t, before any remask
                tok, tok_weight = draws.draw(z, b, p, uni.at(j, b, p, slot=1))
            if rb.numel():
                z[rb, rp] = M
                if conf_variant:
                    weight[rb, rp] = 0.0  # conf = -inf
            if b.numel():
                z[b, p] = tok
                if conf_variant:
                    weight[b, p] = tok_weight
        return argmax_fill(self.denoiser, z)
