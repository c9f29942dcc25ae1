r"""MAUVE features and score (Pillutla et al., 2021).

Features are the final-layer hidden state of the last token,
:math:`\phi(s) = h^{(\mathrm{last})}_{L_s}(y^{(s)}_{1:L_s})`, exactly as ``mauve.compute_mauve``
featurises (tokenizer defaults, truncation to ``max_text_length``, empty texts dropped).  Both
feature sets are quantised jointly by k-means into ``num_buckets`` histograms :math:`P` (reference)
and :math:`Q` (generated).  With :math:`R_\lambda=\lambda P+(1-\lambda)Q` and scaling constant
:math:`c`, the divergence curve is

.. math::
   \mathcal{C}(P,Q) = \bigl\{\bigl(e^{-c\,\mathrm{KL}(Q\|R_\lambda)},\,
                       e^{-c\,\mathrm{KL}(P\|R_\lambda)}\bigr) : \lambda\in(0,1)\bigr\},

and :math:`\mathrm{MAUVE}(P,Q)\in(0,1]` is the area under it (computed by ``mauve.compute_mauve``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from dllm_lit.metrics.functional.text import padded_batches, tokenize

__all__ = ["featurize_texts", "mauve_from_features"]


@torch.no_grad()
def featurize_texts(model: Any, tokenizer: Any, texts: list[str], max_text_length: int, batch_size: int) -> Tensor:
    """Final-layer hidden state of the last token of every non-empty text, ``float32[n, d]`` on CPU."""
    token_lists = tokenize(tokenizer, texts, max_text_length, add_special_tokens=True)
    keep = [i for i, ids in enumerate(token_lists) if len(ids) > 0]
    hidden = model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.n_embd
    feats = torch.zeros(len(keep), hidden, dtype=torch.float32)
    position = {i: k for k, i in enumerate(keep)}
    dev = next(model.parameters()).device
    backbone = model.base_model
    for idx, ids, mask in padded_batches(token_lists, keep, batch_size, dev):
        out = backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True, return_dict=True)
        last = out.hidden_states[-1]
        lengths = mask.sum(dim=1)
        rows = last[torch.arange(last.shape[0], device=last.device), lengths - 1]
        feats[[position[i] for i in idx]] = rows.float().cpu()
    return feats


def mauve_from_features(p: np.ndarray, q: np.ndarray, num_buckets: int | str, seed: int, **mauve_kwargs: Any) -> Any:
    """``mauve.compute_mauve`` on reference features ``p`` and generated features ``q`` (its full output).

    Raises:
        RuntimeError: the feature sizes differ.
        ValueError: more buckets than texts.
    """
    import mauve

    if p.shape[1] != q.shape[1]:
        raise RuntimeError(f"feature sizes differ: reference {p.shape[1]} vs generated {q.shape[1]}")
    if num_buckets != "auto" and num_buckets > p.shape[0] + q.shape[0]:
        raise ValueError(
            f"`num_buckets`={num_buckets} exceeds the {p.shape[0] + q.shape[0]} texts "
            f"({p.shape[0]} reference + {q.shape[0]} generated); use fewer buckets or 'auto'"
        )
    return mauve.compute_mauve(p_features=p, q_features=q, num_buckets=num_buckets, seed=seed, **mauve_kwargs)
