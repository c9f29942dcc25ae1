"""Data: the LightningDataModule serving the chain and the predict work (chain sources: :mod:`dllm_lit.sources`)."""
from dllm_lit.data.datamodule import MarkovDataModule, PredictWork

__all__ = ["MarkovDataModule", "PredictWork"]
