"""Reverse-diffusion samplers, each a LightningModule driven by a frozen denoiser."""
from dllm_lit.samplers.ar import AR
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.block_mdlm import BlockMDLM
from dllm_lit.samplers.dream import Dream
from dllm_lit.samplers.duo import Duo
from dllm_lit.samplers.eb_sampler import EBSampler
from dllm_lit.samplers.fast_dllm import FastDLLM
from dllm_lit.samplers.external import ExternalSampler
from dllm_lit.samplers.fhs import FHS
from dllm_lit.samplers.gidd import GIDD
from dllm_lit.samplers.klass import KLASS
from dllm_lit.samplers.llada import LLaDA
from dllm_lit.samplers.maskgit import MaskGIT
from dllm_lit.samplers.mdlm import MDLM
from dllm_lit.samplers.mdlm_paper import MDLMPaper
from dllm_lit.samplers.nucleus import top_p_filter
from dllm_lit.samplers.pc_sampler import PCSampler
from dllm_lit.samplers.psi import Psi
from dllm_lit.samplers.remdm import ReMDM
from dllm_lit.samplers.sedd import SEDD
from dllm_lit.samplers.sedd_uniform import SEDDUniform

__all__ = ["AR", "BlockMDLM", "Dream", "EBSampler", "ExternalSampler", "FHS", "FastDLLM", "KLASS", "LLaDA", "MDLM", "MDLMPaper", "MaskGIT",
           "PCSampler", "ReMDM", "SEDD", "Sampler", "top_p_filter"]
__all__ += ["Duo", "GIDD", "Psi", "SEDDUniform"]  # uniform-state samplers (issue 23)
