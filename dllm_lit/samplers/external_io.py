"""What crosses the boundary to a sampler in the user's own code (:mod:`dllm_lit.samplers.external`): the callable
named ``"pkg.mod:name"`` and the checks of what it returned, each failure in one line."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import torch

from dllm_lit import checks

__all__ = ["ExternalSamplerError", "resolve", "checked_samples"]


class ExternalSamplerError(ValueError):
    """The user's sampler failed or returned something that is not a batch of chain samples (one line)."""


def resolve(field: str, path: str) -> Any:
    """The object at ``"pkg.mod:name"`` (or ``"pkg.mod.name"``), or a one-line error naming ``field``.  Modules are
    looked up on ``sys.path`` and in the working directory (where a user's own package usually sits)."""
    checks.nonempty_str(field, path)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        from dllm_lit.cli.messages import missing_module_hint

        raise ValueError(f"{field}: cannot import {path!r} ({type(exc).__name__}: {exc}); give 'package.module:name'"
                         f"{missing_module_hint(str(exc))}") from None
    return obj


def checked_samples(x: Any, prompt: torch.Tensor, seq_len: int, vocab_size: int, mask_id: int,
                    who: str) -> torch.Tensor:
    """The user's result ``x`` as a LongTensor [B, seq_len] on the prompt's device (the prompt [B, P] prepended
    where it was left out), or a one-line :class:`ExternalSamplerError` naming ``who``: not a tensor, not integer,
    the wrong shape, a mask id left, an id outside 0..V-1, or a changed prompt."""
    B, P, V = prompt.shape[0], prompt.shape[1], vocab_size
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        x = x[0]
    if not isinstance(x, torch.Tensor):
        raise ExternalSamplerError(f"{who} returned {type(x).__name__}; expected a LongTensor [B, T]")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ExternalSamplerError(f"{who} returned dtype {x.dtype}; expected integer token ids")
    if x.dim() != 2 or x.shape[0] != B or x.shape[1] not in (seq_len, seq_len - P):
        raise ExternalSamplerError(f"{who} returned shape {tuple(x.shape)}; expected [B, T] = [{B}, {seq_len}]"
                                   + (f" or [{B}, {seq_len - P}] without the prompt" if P else ""))
    x = x.to(prompt.device).long()
    if x.shape[1] != seq_len:
        x = torch.cat([prompt, x], 1)
    if bool((x == mask_id).any()):
        n = int((x == mask_id).any(1).sum())
        raise ExternalSamplerError(f"{who} left the mask id {mask_id} in {n} of {B} sequences")
    if bool(((x < 0) | (x >= V)).any()):
        bad = x[(x < 0) | (x >= V)][0]
        raise ExternalSamplerError(f"{who} returned id {int(bad)}, outside the chain's ids 0..{V - 1}")
    if P and not torch.equal(x[:, :P], prompt):
        raise ExternalSamplerError(f"{who} changed the prompt tokens (the first {P} positions)")
    return x
