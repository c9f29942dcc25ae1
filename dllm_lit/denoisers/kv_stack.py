"""A bidirectional masked LM read layer by layer, so that a KV cache can reuse keys and values between calls.

A :class:`KVStack` exposes a transformer as four maps (``n`` positions of a [B, T] state, their absolute positions
``pos`` [B, n]):

    h      = embed(ids)                    [B, n, d]    token embeddings (rotary models add no position here)
    q, k, v = qkv(l, h, pos)               [B, H, n, dh] layer l's projections, rotary positions applied
    h      = out(l, h, ctx)                [B, n, d]    the rest of layer l given its attention output ctx [B, H, n, dh]
    logits = head(h)                       [B, n, V']

and ``scale`` (1 / sqrt(dh)).  Attention itself, ctx = softmax(q K^T scale) V over every key of the sequence (no mask:
the model is bidirectional), is the cache's (:mod:`dllm_lit.denoisers.kv_cache`), which chooses whose K / V are fresh.

Two families are read:

* :class:`RoFormerStack` - ``transformers``' ``RoFormerForMaskedLM``, the model ``python cli.py fit`` trains (post-norm
  BERT layers with rotary query / key, and value when ``rotary_value``);
* :class:`LlamaStack` - the LLaMA layout (pre-norm RMSNorm, rotary q / k, grouped K / V heads, SwiGLU) run without the
  causal mask, which is LLaDA's architecture (Nie et al., *Large Language Diffusion Models*, arXiv:2502.09992): a
  :class:`BidirectionalLlama` wraps a ``LlamaForCausalLM`` and runs it with full attention.

:func:`kv_stack` refuses any other model in one line (a cache needs a model whose keys and values it can read).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

__all__ = ["KVStack", "RoFormerStack", "LlamaStack", "BidirectionalLlama", "kv_stack", "KV_MODELS"]

#: the model classes a KV cache can read (for messages)
KV_MODELS = "RoFormerForMaskedLM (the model `fit` trains) or dllm_lit.denoisers.kv_stack.BidirectionalLlama"


class KVStack(ABC):
    """The layer-by-layer view of a model (module docstring); subclasses implement the four maps."""

    num_layers: int
    scale: float

    @abstractmethod
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings [B, n, d] of ids [B, n]."""

    @abstractmethod
    def qkv(self, layer: int, h: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s q, k, v [B, H, n, dh] of inputs h [B, n, d] at absolute positions pos [B, n]."""

    @abstractmethod
    def out(self, layer: int, h: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s output [B, n, d] from its input h and its attention output ctx [B, H, n, dh]."""

    @abstractmethod
    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits [B, n, V'] of the last layer's outputs h."""


def _heads(x: torch.Tensor, dh: int) -> torch.Tensor:
    """[B, n, H dh] -> [B, H, n, dh]."""
    B, n, _ = x.shape
    return x.view(B, n, -1, dh).transpose(1, 2)


def _merge(ctx: torch.Tensor) -> torch.Tensor:
    """[B, H, n, dh] -> [B, n, H dh]."""
    B, H, n, dh = ctx.shape
    return ctx.transpose(1, 2).reshape(B, n, H * dh)


class RoFormerStack(KVStack):
    """``RoFormerForMaskedLM`` (module docstring): embeddings (+ projection), post-norm layers, the MLM head."""

    def __init__(self, model: nn.Module) -> None:
        cfg = model.config
        self.base, self.cls = model.roformer, model.cls
        self.layers = self.base.encoder.layer
        self.num_layers = len(self.layers)
        self.dh = cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.dh ** -0.5
        self.rotary_value = bool(cfg.rotary_value)
        self.sinusoids = self.base.encoder.embed_positions.weight  # [positions, dh]: sin half, cos half

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.base.embeddings(input_ids=ids)
        return self.base.embeddings_project(h) if hasattr(self.base, "embeddings_project") else h

    def qkv(self, layer: int, h: torch.Tensor, pos: torch.Tensor):
        sa = self.layers[layer].attention.self
        q, k, v = (_heads(f(h), self.dh) for f in (sa.query, sa.key, sa.value))
        sin_cos = self.sinusoids[pos][:, None]  # [B, 1, n, dh]
        if self.rotary_value:
            return sa.apply_rotary_position_embeddings(sin_cos, q, k, v)
        q, k = sa.apply_rotary_position_embeddings(sin_cos, q, k)
        return q, k, v

    def out(self, layer: int, h: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        lay = self.layers[layer]
        a = lay.attention.output(_merge(ctx), h)
        return lay.output(lay.intermediate(a), a)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.cls(h)


class BidirectionalLlama(nn.Module):
    """A LLaMA-layout transformer run with full attention: LLaDA's architecture (arXiv:2502.09992), built from a
    ``transformers`` ``LlamaConfig`` (or a dict of its settings).  ``forward(input_ids)`` returns the logits."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.lm = LlamaForCausalLM(config if isinstance(config, LlamaConfig) else LlamaConfig(**config))
        self.config = self.lm.config

    def get_input_embeddings(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        B, T = input_ids.shape
        full = torch.zeros((B, 1, T, T), dtype=self.lm.dtype, device=input_ids.device)  # additive: every key seen
        return self.lm(input_ids=input_ids, attention_mask=full).logits


class LlamaStack(KVStack):
    """:class:`BidirectionalLlama` (module docstring): pre-norm layers, grouped K / V repeated to the query heads."""

    def __init__(self, model: BidirectionalLlama) -> None:
        self.base, self.lm_head = model.lm.model, model.lm.lm_head
        self.layers = self.base.layers
        self.num_layers = len(self.layers)
        cfg = model.config
        self.dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.dh ** -0.5
        self.groups = cfg.num_attention_heads // cfg.num_key_value_heads

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.base.embed_tokens(ids)

    def qkv(self, layer: int, h: torch.Tensor, pos: torch.Tensor):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        att = self.layers[layer].self_attn
        x = self.layers[layer].input_layernorm(h)
        q, k, v = (_heads(f(x), self.dh) for f in (att.q_proj, att.k_proj, att.v_proj))
        cos, sin = self.base.rotary_emb(x, pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if self.groups > 1:
            k, v = (t.repeat_interleave(self.groups, dim=1) for t in (k, v))
        return q, k, v

    def out(self, layer: int, h: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        lay = self.layers[layer]
        h = h + lay.self_attn.o_proj(_merge(ctx))
        return h + lay.mlp(lay.post_attention_layernorm(h))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.base.norm(h))


def kv_stack(model: nn.Module, cache: str) -> KVStack:
    """The :class:`KVStack` of ``model``; one-line ValueError when the cache ``cache`` cannot read its keys and values."""
    if type(model).__name__ == "RoFormerForMaskedLM" and hasattr(model, "roformer"):
        if getattr(model.config, "is_decoder", False):
            raise ValueError(f"cache={cache!r} needs a bidirectional model; this RoFormer is a decoder (is_decoder)")
        return RoFormerStack(model)
    if isinstance(model, BidirectionalLlama):
        return LlamaStack(model)
    raise ValueError(f"cache={cache!r} needs a model whose keys and values dllm_lit can read ({KV_MODELS}); "
                     f"{type(model).__name__} is not one: use cache: none")
