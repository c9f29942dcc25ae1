"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser."""
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.mdlm import MDLM

__all__ = ["MDLM", "Sampler"]
