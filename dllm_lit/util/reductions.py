"""Reductions whose rounding does not depend on the device or the batch size.

``torch.sum`` leaves its order of additions to the implementation: CPU and CUDA kernels (and CUDA kernels
for different tensor shapes) group the terms differently, so a float32 row sum can differ in its last bit
between devices.  Posterior rows normalised by such sums then differ by an ulp, and any decision that
compares them (the rank of two nearly equal confidences, a threshold) can flip.  :func:`fixed_order_sum`
adds in one fixed pairwise tree built from elementwise additions, which IEEE 754 rounds the same way on
every device, so each row's sum is a function of that row alone.
"""
from __future__ import annotations

import torch

__all__ = ["fixed_order_sum"]


def fixed_order_sum(x: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """Sum over the last dimension by a fixed pairwise tree: bit-identical on CPU and CUDA, for any batch.

    With n terms, level by level: ``s[i] = s[i] + s[i + h]`` for ``h = n // 2`` (an odd last term is added to
    ``s[0]`` afterwards), until one term is left.  log2(n) elementwise additions; the rounding error is that
    of pairwise summation, O(log n) ulps.
    """
    n = x.shape[-1]
    if n == 0:
        out = x.new_zeros(x.shape[:-1])
        return out.unsqueeze(-1) if keepdim else out
    s = x
    while n > 1:
        h = n // 2
        t = s[..., :h] + s[..., h:2 * h]
        if n % 2:
            t[..., :1] += s[..., 2 * h:]
        s, n = t, h
    return s if keepdim else s.squeeze(-1)
