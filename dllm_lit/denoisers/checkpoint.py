"""A denoiser from a Lightning checkpoint of :class:`dllm_lit.training.DenoiserTraining`.

``python cli.py fit --config configs/train_denoiser.yaml`` writes ``.ckpt`` files whose
``dllm_lit`` entry records the model's ``transformers`` config, the chain's vocabulary size and
its fingerprint; :class:`CheckpointDenoiser` rebuilds the masked LM from that config, loads the
weights and serves it through :class:`~dllm_lit.denoisers.learned.LearnedDenoiser`::

    model:
      class_path: dllm_lit.samplers.MDLM
      init_args:
        denoiser:
          class_path: dllm_lit.denoisers.CheckpointDenoiser
          init_args: {path: outputs/denoiser/checkpoints/last.ckpt}

A ``.ckpt`` is a pickle: load only checkpoints you trust (as with ``LightningModule.load_from_checkpoint``).
"""
from __future__ import annotations

import os

import torch

from dllm_lit import checks
from dllm_lit.denoisers.learned import DenoiserLoadError, LearnedDenoiser

__all__ = ["CheckpointDenoiser", "CHECKPOINT_KEY", "model_from_config"]

#: entry of a Lightning checkpoint in which DenoiserTraining records what a denoiser needs
CHECKPOINT_KEY = "dllm_lit"


def model_from_config(config: dict):
    """A ``transformers`` masked LM built (randomly initialised) from ``config.to_dict()`` output."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    return AutoModelForMaskedLM.from_config(AutoConfig.for_model(model_type, **cfg))


class CheckpointDenoiser(LearnedDenoiser):
    """Lightning ``.ckpt`` of :class:`~dllm_lit.training.DenoiserTraining` as a denoiser.

    Args:
        path: the ``.ckpt`` file.
        batch_size, allow_other_chain, cpu_threads: as :class:`~dllm_lit.denoisers.HFDenoiser`.
    """

    def __init__(self, path: str, batch_size: int = 64, allow_other_chain: bool = False,
                 cpu_threads: int | None = 1) -> None:
        super().__init__(mask_token_id=None, batch_size=batch_size, allow_other_chain=allow_other_chain,
                         cpu_threads=cpu_threads)
        self.path = str(checks.nonempty_str("path", path))
        self.source = repr(self.path)
        prefix = f"cannot load the denoiser checkpoint {self.path!r}"
        if not os.path.isfile(self.path):
            raise DenoiserLoadError(f"{prefix}: no such file" + (" (a directory: use HFDenoiser for a save_pretrained "
                                                                  "export)" if os.path.isdir(self.path) else ""))
        try:
            ckpt = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
            raise DenoiserLoadError(f"{prefix}: not a readable torch checkpoint ({type(exc).__name__})") from None
        info = ckpt.get(CHECKPOINT_KEY) if isinstance(ckpt, dict) else None
        if not isinstance(info, dict) or "model_config" not in info:
            raise DenoiserLoadError(f"{prefix}: not a checkpoint of dllm_lit.training.DenoiserTraining "
                                    f"(no {CHECKPOINT_KEY!r} entry)")
        self.model = model_from_config(info["model_config"])
        state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise DenoiserLoadError(f"{prefix}: weights do not match the recorded model "
                                    f"({len(missing)} missing, {len(unexpected)} unexpected)")
        self.model.eval().requires_grad_(False)
        self.trained_on = info.get("chain_fingerprint")
        self.mask_token_id = info.get("mask_id")
        self.trained_seq_len = info.get("seq_len")

    def describe(self) -> dict:
        return {"denoiser": "checkpoint", "path": self.path, "trained_on": self.trained_on}
