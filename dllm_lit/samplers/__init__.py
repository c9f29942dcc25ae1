"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser.

The sampler classes load on first use (``from dllm_lit.samplers import LLaDA``; module ``__getattr__``,
PEP 562), so ``import dllm_lit.samplers`` and its Lightning-free modules (``draws``, ``selection``,
``schedules``, the decoding engine) do not import Lightning.  A new sampler adds one
``"<Class>": "<module>"`` line to :data:`_EXPORTS`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dllm_lit.util.lazy_exports import lazy_exports

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


def load_all() -> list[Any]:
    """Import every exported sampler (so that a config may name one by its class name alone)."""
    return [getattr(importlib.import_module(__name__), name) for name in __all__]


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from dllm_lit.samplers.ar import AR
    from dllm_lit.samplers.base import Sampler
    from dllm_lit.samplers.block_mdlm import BlockMDLM
    from dllm_lit.samplers.dream import Dream
    from dllm_lit.samplers.eb_sampler import EBSampler
    from dllm_lit.samplers.external import ExternalSampler
    from dllm_lit.samplers.fast_dllm import FastDLLM
    from dllm_lit.samplers.fhs import FHS
    from dllm_lit.samplers.klass import KLASS
    from dllm_lit.samplers.llada import LLaDA
    from dllm_lit.samplers.maskgit import MaskGIT
    from dllm_lit.samplers.mdlm import MDLM
    from dllm_lit.samplers.mdlm_paper import MDLMPaper
    from dllm_lit.decoding import top_p_filter
    from dllm_lit.samplers.pc_sampler import PCSampler
    from dllm_lit.samplers.remdm import ReMDM
    from dllm_lit.samplers.sedd import SEDD
    from dllm_lit.samplers.assd import ASSD
    from dllm_lit.samplers.dus import DUS
    from dllm_lit.samplers.llada21 import LLaDA21
    from dllm_lit.samplers.wino import WINO
    from dllm_lit.samplers.p2 import P2
    from dllm_lit.samplers.slowfast import SlowFast
    from dllm_lit.samplers.duo import Duo
    from dllm_lit.samplers.gidd import GIDD
    from dllm_lit.samplers.psi import Psi
    from dllm_lit.samplers.diffusion_gemma import DiffusionGemma
    from dllm_lit.samplers.sedd_uniform import SEDDUniform
