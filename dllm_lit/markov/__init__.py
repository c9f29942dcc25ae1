"""Ground-truth Markov chains: the chain and its maths, the synthetic generator, persistence (paper Sec. 3.1,
App. E).  Where chains come from (bundled counts, corpora, files) is :mod:`dllm_lit.sources`."""
from dllm_lit.markov.chain import ChainError, MarkovChain
from dllm_lit.markov.io import load_chain, save_chain
from dllm_lit.markov.synthetic import synthetic_chain
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["ChainError", "MarkovChain", "load_chain", "save_chain", "synthetic_chain", "HMMWorld"]
