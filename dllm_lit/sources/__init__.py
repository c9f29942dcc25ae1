"""Chain sources: where a ground-truth :class:`~dllm_lit.markov.MarkovChain` comes from, one source per module.

Configs name a source by ``class_path: dllm_lit.sources.<Name>`` (fragments in ``configs/data/``).  Adding a
source is one module here, its export line below (or :func:`register` at run time; a name already exported is
refused in one line) and one config fragment: the module subclasses
:class:`ChainSource` (or :class:`CorpusChainSource` for a chain counted from a corpus and cached), keeps each
``__init__`` argument as an attribute of the same name (what :meth:`ChainSource.describe` reports), and takes
``sparsity: SparsityOptions`` if it builds the chain from bigram counts.  The tests build every exported source
(``cls(**cls.example_init_args)``), so a new one needs no test edit.
"""
from dllm_lit.sources.base import ChainSource, IdDecoder, TextDecoder
from dllm_lit.sources.chain_file import ChainFile
from dllm_lit.sources.corpus_chain import CORPUS_CHAIN_FORMAT, CharCorpusChainSource, CorpusChainSource
from dllm_lit.sources.english import EnglishChars, english_char_chain
from dllm_lit.sources.local_text import LocalTextChars
from dllm_lit.sources.openwebtext import OpenWebTextBPE
from dllm_lit.sources.options import SparsityOptions
from dllm_lit.sources.paper_artifact import PaperArtifact, load_paper_artifact, load_reference_samples
from dllm_lit.sources.synthetic import Synthetic
from dllm_lit.sources.text8 import Text8Chars
from dllm_lit.sources.kth_order import KthOrderChars
from dllm_lit.sources.switching_chains import SwitchingChains
from dllm_lit.sources.hmm_synthetic import HMMSynthetic
from dllm_lit.sources.list_tasks import ListTask

__all__ = [
    # the interface
    "ChainSource", "TextDecoder", "IdDecoder", "SparsityOptions", "CorpusChainSource", "CharCorpusChainSource",
    "CORPUS_CHAIN_FORMAT",
    # sources
    "EnglishChars", "Synthetic", "ChainFile", "PaperArtifact", "Text8Chars", "LocalTextChars", "OpenWebTextBPE",
    # HMM worlds
    "KthOrderChars", "SwitchingChains", "HMMSynthetic", "ListTask",
    # functions behind them
    "english_char_chain", "load_paper_artifact", "load_reference_samples",
]


def register(cls: type) -> type:
    """Export the chain source ``cls`` as ``dllm_lit.sources.<cls.__name__>``; a name already exported is refused
    in one line.  Returns ``cls`` (usable as a class decorator)."""
    import sys

    from dllm_lit.util.registration import refuse_clash

    if not (isinstance(cls, type) and issubclass(cls, ChainSource)):
        raise ValueError(f"register: {cls!r} is not a chain source (a subclass of dllm_lit.sources.ChainSource)")
    refuse_clash("source", cls.__name__, set(__all__))
    setattr(sys.modules[__name__], cls.__name__, cls)
    __all__.append(cls.__name__)
    return cls
