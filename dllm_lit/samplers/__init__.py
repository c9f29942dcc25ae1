"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser."""
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.mdlm import MDLM
from dllm_lit.samplers.nucleus import top_p_filter
from dllm_lit.samplers.remdm import ReMDM

__all__ = ["MDLM", "ReMDM", "Sampler", "top_p_filter"]
