"""Training learned denoisers on exact chain samples (``python cli.py fit --config configs/train_denoiser.yaml``)."""
from dllm_lit.training.data import TRAIN_BASE, VAL_BASE, TrainStream, ValidationChunks
from dllm_lit.training.module import DenoiserTraining
from dllm_lit.training.objective import masked_kl, nelbo, noise, subs_log_probs

__all__ = ["DenoiserTraining", "TrainStream", "ValidationChunks", "TRAIN_BASE", "VAL_BASE", "masked_kl", "nelbo",
           "noise", "subs_log_probs"]
