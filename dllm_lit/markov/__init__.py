"""Ground-truth Markov chains: construction, sampling, artifacts (paper Sec. 3.1, App. E)."""
from dllm_lit.markov.artifact import load_paper_artifact, load_reference_samples
from dllm_lit.markov.chain import ChainError, MarkovChain
from dllm_lit.markov.english import english_char_chain
from dllm_lit.markov.io import load_chain, save_chain
from dllm_lit.markov.synthetic import synthetic_chain

__all__ = [
    "ChainError", "MarkovChain", "english_char_chain", "load_chain", "load_paper_artifact",
    "load_reference_samples", "save_chain", "synthetic_chain",
]
