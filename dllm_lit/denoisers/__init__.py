"""Denoisers: the exact oracle and the shared interface a learned model implements."""
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.forward_backward import forward_backward_posterior
from dllm_lit.denoisers.learned import HFDenoiser
from dllm_lit.denoisers.oracle import OracleDenoiser, nearest_revealed

__all__ = ["Denoiser", "HFDenoiser", "OracleDenoiser", "forward_backward_posterior", "nearest_revealed"]
