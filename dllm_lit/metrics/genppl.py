r"""Generative perplexity under a pretrained causal LM (paper Appendix "External Language-Model
Metrics"; see ``docs/metrics.md``): GPT-2 Large in the paper, texts re-tokenised by its tokenizer,
truncated to 1024 tokens, no BOS.

With :math:`\ell_s` the summed NLL of text :math:`s` and :math:`L_s - 1` its scored tokens
(:func:`dllm_lit.metrics.functional.genppl.score_texts`)

.. math::
   \mathrm{NLL} = \frac{\sum_s \ell_s}{\sum_s (L_s - 1)}, \qquad \mathrm{GenPPL} = \exp(\mathrm{NLL}) .

This is the paper's token-level definition with the tokens that can be scored without a BOS
(texts shorter than 2 tokens contribute nothing).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit import checks
from dllm_lit.metrics.bootstrap import IntervalPolicy, RatioOfSums, SequenceBootstrapMixin
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states
from dllm_lit.metrics.functional.genppl import score_texts
from dllm_lit.metrics.functional.text import check_texts
from dllm_lit.metrics.lm_loading import LanguageModelMixin, check_device, check_model_name, resolve_dtype

__all__ = ["GenerativePerplexity"]


class GenerativePerplexity(SequenceBootstrapMixin, LanguageModelMixin, TypedCatStateMixin, Metric):
    r"""Generative perplexity :math:`\mathrm{GenPPL}` of decoded texts (see the module docstring).

    Args:
        model_name_or_path: Hugging Face causal LM id or local directory (paper: ``"gpt2-large"``).
        batch_size: texts per forward pass.
        max_length: truncation length in LM tokens (paper: 1024; must not exceed the model's
            context).
        device: device of the LM; ``None`` = the metric's device (Lightning moves it with the module).
        dtype: LM parameter dtype (``None`` = float32; ``"bfloat16"``/``"float16"`` for speed). The
            NLL is accumulated in float64 from float32 log-probabilities.
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    States: ``nll_sum`` (float64) and ``token_count`` (int64), ``dist_reduce_fx="sum"``; per-text
    ``text_nll`` (float64) and ``text_tokens`` (int64) cat states for :meth:`bootstrap_ci`.
    The LM runs in ``update`` (so each process scores its own texts).

    Interval: percentile bootstrap of the mean NLL :math:`\sum_s w_s \ell_s / \sum_s w_s (L_s-1)`,
    mapped through ``exp`` (percentile intervals are transformation equivariant).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    interval_policy = IntervalPolicy("percentile", transform=math.exp)

    nll_sum: Tensor
    token_count: Tensor

    _cat_state_specs = {"text_nll": (torch.float64, ()), "text_tokens": (torch.int64, ())}

    def __init__(
        self,
        model_name_or_path: str = "gpt2-large",
        batch_size: int = 8,
        max_length: int = 1024,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model_name_or_path = check_model_name("`model_name_or_path`", model_name_or_path)
        self.batch_size = checks.integer("`batch_size`", batch_size)
        self.max_length = checks.integer("`max_length`", max_length, minimum=2)  # the first token is not scored
        self._max_length = max_length
        self._lm_device = check_device(device)
        self._lm_dtype = resolve_dtype(dtype)
        self.add_state("nll_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("token_count", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("text_nll", default=[], dist_reduce_fx="cat")
        self.add_state("text_tokens", default=[], dist_reduce_fx="cat")

    def score_texts(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Per-text summed NLL :math:`\\ell_s` (float64, nats) and scored-token count :math:`L_s-1`."""
        texts = check_texts(texts)
        model, tokenizer = self._load()
        return score_texts(model, tokenizer, texts, self.max_length, self.batch_size)

    def update(self, texts: Sequence[str]) -> None:
        """Score a batch of decoded texts (``list[str]``)."""
        nll, count = self.score_texts(texts)
        nll, count = nll.to(self.device), count.to(self.device)
        self.nll_sum += nll.sum()
        self.token_count += count.sum()
        self.text_nll.append(nll)
        self.text_tokens.append(count)

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{GenPPL}` (float64 scalar)."""
        if int(self.token_count) == 0:
            raise EmptyMetricError(
                f"{type(self).__name__}.compute(): no scorable token (call update() with texts of >= 2 LM tokens)"
            )
        return torch.exp(self.nll_sum / self.token_count.double())

    def sequence_statistics(self) -> dict[str, Tensor]:
        """``{"nll": l_s, "tokens": L_s - 1}`` per text."""
        with synced_cat_states(self, {"text_nll": torch.float64, "text_tokens": torch.int64}) as states:
            nll, count = states["text_nll"], states["text_tokens"]
        if int(count.sum()) == 0:
            raise EmptyMetricError(f"{type(self).__name__}.bootstrap_ci(): no scorable token seen")
        return {"nll": nll, "tokens": count}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> RatioOfSums:
        return RatioOfSums(statistics["nll"], statistics["tokens"])
