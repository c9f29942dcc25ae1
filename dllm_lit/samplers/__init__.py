"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser."""
from dllm_lit.samplers.ar import AR
from dllm_lit.samplers.assd import ASSD
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.block_mdlm import BlockMDLM
from dllm_lit.samplers.dream import Dream
from dllm_lit.samplers.dus import DUS
from dllm_lit.samplers.eb_sampler import EBSampler
from dllm_lit.samplers.fast_dllm import FastDLLM
from dllm_lit.samplers.external import ExternalSampler
from dllm_lit.samplers.fhs import FHS
from dllm_lit.samplers.klass import KLASS
from dllm_lit.samplers.llada import LLaDA
from dllm_lit.samplers.llada21 import LLaDA21
from dllm_lit.samplers.maskgit import MaskGIT
from dllm_lit.samplers.mdlm import MDLM
from dllm_lit.samplers.mdlm_paper import MDLMPaper
from dllm_lit.samplers.nucleus import top_p_filter
from dllm_lit.samplers.pc_sampler import PCSampler
from dllm_lit.samplers.remdm import ReMDM
from dllm_lit.samplers.sedd import SEDD
from dllm_lit.samplers.wino import WINO

__all__ = ["AR", "ASSD", "BlockMDLM", "Dream", "DUS", "EBSampler", "ExternalSampler", "FHS", "FastDLLM", "KLASS", "LLaDA", "LLaDA21", "MDLM", "MDLMPaper", "MaskGIT",
           "PCSampler", "ReMDM", "SEDD", "Sampler", "WINO", "top_p_filter"]
