"""Denoisers: the exact oracle and the shared interface a learned model implements."""
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.forward_backward import forward_backward_posterior
from dllm_lit.denoisers.checkpoint import CheckpointDenoiser
from dllm_lit.denoisers.learned import (DenoiserLoadError, DenoiserMismatchError, HFDenoiser, LearnedDenoiser,
                                        chain_fingerprint)
from dllm_lit.denoisers.local import LocalDenoiser, nearest_revealed
from dllm_lit.denoisers.oracle import OracleDenoiser
from dllm_lit.denoisers.channels import ABSORBING, AbsorbingMask, EvidenceChannel, MaskedUniform, UniformNoise
from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.denoisers.scored import ScoredDenoiser

__all__ = ["CheckpointDenoiser", "Denoiser", "DenoiserLoadError", "DenoiserMismatchError", "HFDenoiser",
           "LearnedDenoiser", "chain_fingerprint", "LocalDenoiser", "OracleDenoiser", "forward_backward_posterior", "nearest_revealed",
           "ABSORBING", "AbsorbingMask", "EvidenceChannel", "MaskedUniform", "UniformNoise", "HMMOracleDenoiser",
           "hmm_posterior", "ScoredDenoiser"]
