"""Data: chain sources and the LightningDataModule serving predict work."""
from dllm_lit.data.corpus_sources import CorpusChainSource, LocalTextChars, OpenWebTextBPE, Text8Chars
from dllm_lit.data.datamodule import MarkovDataModule, PredictWork
from dllm_lit.data.sources import ChainFile, ChainSource, EnglishChars, IdDecoder, PaperArtifact, Synthetic

__all__ = ["ChainFile", "ChainSource", "CorpusChainSource", "LocalTextChars", "OpenWebTextBPE", "Text8Chars", "EnglishChars", "IdDecoder", "MarkovDataModule", "PaperArtifact", "PredictWork", "Synthetic"]
