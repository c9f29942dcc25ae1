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

A ``.ckpt`` is a pickle, and unpickling can run arbitrary code.  It is therefore loaded with
``torch.load(weights_only=True)``: only tensors, dtypes, containers, numbers and strings are rebuilt
(all that a checkpoint of ``DenoiserTraining`` holds), and a file that names any other class is
refused with one line before any of it runs.  ``trust_checkpoint: true`` (the counterpart of
``trust_remote_code``) is the only way to unpickle such a file in full; set it only for a file you trust.
"""
from __future__ import annotations

import os

import torch

from dllm_lit import checks
from dllm_lit.denoisers.learned import DenoiserLoadError, LearnedDenoiser
from dllm_lit.util.safe_load import load_failure

__all__ = ["CheckpointDenoiser", "CHECKPOINT_KEY", "model_from_config", "load_checkpoint"]

#: entry of a Lightning checkpoint in which DenoiserTraining records what a denoiser needs
CHECKPOINT_KEY = "dllm_lit"


def load_checkpoint(path: str, trust_checkpoint: bool = False):
    """``torch.load`` of a ``.ckpt`` on the CPU, weights only unless ``trust_checkpoint``.

    The weights-only unpickler rebuilds tensors, dtypes, dicts (``OrderedDict`` too), lists, tuples, numbers and
    strings, and refuses every other class before anything runs.  That is all a checkpoint of
    :class:`~dllm_lit.training.DenoiserTraining` holds: Lightning stores its hyper-parameters as a plain dict
    and ``transformers`` configs enter it as ``config.to_dict()``, so no class needs to be allow-listed.

    Raises :class:`DenoiserLoadError` with one line: the file names classes outside the allow-list (listed,
    with the opt-in), or it is not a readable torch checkpoint.
    """
    prefix = f"cannot load the denoiser checkpoint {path!r}"
    try:
        return torch.load(path, map_location="cpu", weights_only=not trust_checkpoint)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means "not a loadable checkpoint"
        why = load_failure(path, exc, weights_only=not trust_checkpoint)
        hint = "; if you trust the file, set trust_checkpoint: true" if why.startswith("it holds") else ""
        raise DenoiserLoadError(f"{prefix}: {why}{hint}") from None


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
        batch_size, allow_other_chain, cpu_threads, cache, refresh_interval, drift_threshold: as
            :class:`~dllm_lit.denoisers.HFDenoiser`.
        trust_checkpoint: unpickle the file in full (it may then run code); by default only weights, plain
            containers, numbers and strings are loaded (see the module docstring).
    """

    def __init__(self, path: str, batch_size: int = 64, allow_other_chain: bool = False,
                 cpu_threads: int | None = 1, trust_checkpoint: bool = False, cache: str = "none",
                 refresh_interval: int | None = None, drift_threshold: float = 0.1) -> None:
        super().__init__(mask_token_id=None, batch_size=batch_size, allow_other_chain=allow_other_chain,
                         cpu_threads=cpu_threads, cache=cache, refresh_interval=refresh_interval,
                         drift_threshold=drift_threshold)
        self.path = str(checks.nonempty_str("path", path))
        self.source = repr(self.path)
        self.trust_checkpoint = checks.boolean("trust_checkpoint", trust_checkpoint)
        prefix = f"cannot load the denoiser checkpoint {self.path!r}"
        if not os.path.isfile(self.path):
            raise DenoiserLoadError(f"{prefix}: no such file" + (" (a directory: use HFDenoiser for a save_pretrained "
                                                                  "export)" if os.path.isdir(self.path) else ""))
        ckpt = load_checkpoint(self.path, self.trust_checkpoint)
        info = ckpt.get(CHECKPOINT_KEY) if isinstance(ckpt, dict) else None
        if not isinstance(info, dict) or not isinstance(info.get("model_config"), dict):
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
        self._setup_cache()

    def describe(self) -> dict:
        return {"denoiser": "checkpoint", "path": self.path, "trained_on": self.trained_on, **self.cache_settings()}
