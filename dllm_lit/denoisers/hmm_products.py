"""The fixed-order products of an HMM world, re-exported from their home :mod:`dllm_lit.markov.products` (below the
denoisers, so the exact world's per-sequence paths share them)."""
from dllm_lit.markov.products import (TINY, WorldProducts, context_blocks, context_sums, dense_product, left_product,
                                      normalise_or, normalised, numba_available, right_product, row_sums, torch_product)

__all__ = ["WorldProducts", "dense_product", "torch_product", "context_blocks", "right_product", "left_product",
           "context_sums", "row_sums", "normalised", "normalise_or", "numba_available", "TINY"]
