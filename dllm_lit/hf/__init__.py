"""The exact oracle as a Hugging Face model and tokenizer, so a sampler's own code can run on it unchanged.

Importing this package registers :class:`OracleConfig` / :class:`OracleForMaskedLM` with ``AutoConfig`` and
``AutoModelForMaskedLM``.  docs/oracle_model.md describes the semantics.
"""
from transformers import AutoConfig, AutoModelForMaskedLM

from dllm_lit.hf.config import OracleConfig
from dllm_lit.hf.model import OracleForMaskedLM

AutoConfig.register(OracleConfig.model_type, OracleConfig, exist_ok=True)
AutoModelForMaskedLM.register(OracleConfig, OracleForMaskedLM, exist_ok=True)

__all__ = ["OracleConfig", "OracleForMaskedLM"]
