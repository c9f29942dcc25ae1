"""Data: chain sources and the LightningDataModule serving predict work."""
from dllm_lit.data.datamodule import MarkovDataModule, PredictWork
from dllm_lit.data.sources import ChainFile, ChainSource, EnglishChars, IdDecoder, PaperArtifact, Synthetic

__all__ = ["ChainFile", "ChainSource", "EnglishChars", "IdDecoder", "MarkovDataModule", "PaperArtifact", "PredictWork", "Synthetic"]
