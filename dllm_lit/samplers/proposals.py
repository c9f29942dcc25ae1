"""Token proposals at every masked position of a block, for confidence-ranked samplers.

LLaDA's low-confidence remasking, MaskGIT and KLASS all draw, at each step, a proposal x̂_l at
every masked position l of the current block and rank positions by its confidence p_l(x̂_l):

    x̂_l = argmax_v p_l(v)                      (temperature 0; ties -> lowest token id)
    x̂_l ~ p_l^(1/tau) / sum_v p_l(v)^(1/tau)   (temperature tau > 0; inverse-CDF draw)
    confidence c_l = p_l(x̂_l)                  (the untempered probability)

:class:`Proposals` computes them either directly (``probs_at`` at every masked position) or from a
:class:`~dllm_lit.samplers.posterior_cache.PosteriorCache` holding the proposal cdf, p itself
(float32) and the argmax per position, refreshed only where a nearest revealed neighbour changed.
Both paths give identical draws with the default float32 oracle (tested in each sampler's tests).
"""
from __future__ import annotations

import torch

from dllm_lit.samplers.draws import categorical_from_stored_cdf, sharpen, tempered_draw
from dllm_lit.samplers.posterior_cache import PosteriorCache

__all__ = ["Proposals"]


class Proposals:
    """Proposals and confidences over the positions [lo, hi) of a [B, T] state (see module docstring).

    Args:
        denoiser: the sampler's denoiser.
        temperature: proposal temperature tau >= 0.
        B, lo, hi, device: batch size, block bounds and device of the state.
        use_cache: keep a :class:`PosteriorCache` when it fits the memory budget.
    """

    def __init__(self, denoiser, temperature: float, B: int, lo: int, hi: int, device: torch.device,
                 use_cache: bool = True) -> None:
        self.den = denoiser
        self.temperature = float(temperature)
        V = int(denoiser.vocab_size)
        self.cache: PosteriorCache | None = None
        if use_cache and PosteriorCache.fits(B, 2 * V + 2, length=hi - lo):
            self.cache = PosteriorCache(denoiser, B, lo, hi, self._features,
                                        {"cdf": ((V,), torch.float64), "probs": ((V,), torch.float32),
                                         "argmax": ((), torch.int64)}, device)

    def _features(self, probs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per position: the proposal law's float64 cdf, p itself (float32) and its argmax."""
        tau = self.temperature
        law = probs if tau in (0.0, 1.0) else sharpen(probs, 1.0 / tau)
        return {"cdf": law.to(torch.float64).cumsum(-1), "probs": probs.to(torch.float32), "argmax": probs.argmax(-1)}

    def propose(self, x: torch.Tensor, b: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
                rows: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(tokens, float64 confidences, posterior rows or None) at the masked (b, p) pairs of the block.

        ``u``: one uniform per pair (unused at temperature 0).  ``rows=True`` also returns the
        posterior rows p_l [n, V] (float32 from the cache, the denoiser's dtype otherwise).
        """
        if self.cache is None:
            probs = self.den.probs_at(x, b, p)
            tok = tempered_draw(probs, u, self.temperature)
            conf = probs.gather(1, tok[:, None]).squeeze(1).to(torch.float64)
            return tok, conf, (probs if rows else None)
        cache = self.cache
        cache.refresh(x)
        if self.temperature == 0:
            tok = cache.get("argmax", b, p)
        else:
            cdf = cache.store["cdf"]
            tok = categorical_from_stored_cdf(cdf.view(-1, cdf.shape[-1]), cache.rows(b, p), u)
        conf = cache.get("probs", b, p, tok).to(torch.float64)
        return tok, conf, (cache.get("probs", b, p) if rows else None)
