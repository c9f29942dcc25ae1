"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser.

The sampler classes load on first use (``from dllm_lit.samplers import LLaDA``; module ``__getattr__``,
PEP 562), so ``import dllm_lit.samplers`` and its Lightning-free modules (``draws``, ``selection``,
``schedules``, the decoding engine) do not import Lightning.  A new sampler adds one
``"<Class>": "<module>"`` line to :data:`_EXPORTS`, the one table of the names (``__all__`` is read from it);
:func:`register` adds one at run time and refuses a name already taken.
"""
from __future__ import annotations

import importlib
from typing import Any

from dllm_lit.util.lazy_exports import lazy_exports
from dllm_lit.util.registration import refuse_clash

#: exported name -> the module of this package that defines it
_EXPORTS: dict[str, str] = {
    "AR": "ar",
    "BlockMDLM": "block_mdlm",
    "Dream": "dream",
    "EBSampler": "eb_sampler",
    "ExternalSampler": "external",
    "FHS": "fhs",
    "FastDLLM": "fast_dllm",
    "KLASS": "klass",
    "LLaDA": "llada",
    "MDLM": "mdlm",
    "MDLMPaper": "mdlm_paper",
    "MaskGIT": "maskgit",
    "PCSampler": "pc_sampler",
    "ReMDM": "remdm",
    "SEDD": "sedd",
    "Sampler": "base",
    "ASSD": "assd",
    "DUS": "dus",
    "LLaDA21": "llada21",
    "WINO": "wino",
    "P2": "p2",
    "SlowFast": "slowfast",
    "Duo": "duo",
    "GIDD": "gidd",
    "Psi": "psi",
    "SEDDUniform": "sedd_uniform",
    "DiffusionGemma": "diffusion_gemma",
    "top_p_filter": "dllm_lit.decoding",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def register(name: str, module: str) -> None:
    """Export ``name`` (defined in ``module``: a submodule of this package or a full dotted module name); a name
    already exported is refused in one line."""
    refuse_clash("sampler", name, _EXPORTS)
    _EXPORTS[name] = module
    __all__.append(name)


def load_all() -> list[Any]:
    """Import every exported sampler (so that a config may name one by its class name alone)."""
    return [getattr(importlib.import_module(__name__), name) for name in __all__]
