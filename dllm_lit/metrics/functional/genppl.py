r"""Per-text negative log-likelihood under a causal LM (the sufficient statistics of GenPPL).

Each text :math:`s` is re-tokenised by the LM's tokenizer into :math:`y^{(s)}_{1:L_s}` (no BOS or
other special tokens added, truncated to ``max_length``); the first token has no context and is
not scored: :math:`\ell_s = -\sum_{t=2}^{L_s}\log p_{\mathrm{LM}}(y^{(s)}_t \mid y^{(s)}_{<t})`.
Batches are right-padded with an attention mask, so padding does not change any score.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from dllm_lit.metrics.functional.text import padded_batches, tokenize

__all__ = ["score_texts"]


@torch.no_grad()
def score_texts(model: Any, tokenizer: Any, texts: list[str], max_length: int, batch_size: int) -> tuple[Tensor, Tensor]:
    """Per-text summed NLL :math:`\\ell_s` (float64, nats, on CPU) and scored-token count :math:`L_s-1` (int64).

    Texts shorter than 2 LM tokens score ``(0, 0)``.  Log-probabilities are float32, sums float64.
    """
    token_lists = tokenize(tokenizer, texts, max_length, add_special_tokens=False)
    nll = torch.zeros(len(texts), dtype=torch.float64)
    count = torch.zeros(len(texts), dtype=torch.int64)
    scorable = [i for i, ids in enumerate(token_lists) if len(ids) >= 2]
    dev = next(model.parameters()).device
    for idx, ids, mask in padded_batches(token_lists, scorable, batch_size, dev):
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        target, target_mask = ids[:, 1:], mask[:, 1:]
        token_nll = F.cross_entropy(logits.transpose(1, 2), target, reduction="none") * target_mask
        nll[idx] = token_nll.double().sum(dim=1).cpu()
        count[idx] = target_mask.sum(dim=1).cpu()
    return nll, count
