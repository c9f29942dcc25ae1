"""Hugging Face causal language models for the metrics that read texts (GenPPL, MAUVE).

Models are loaded with :func:`load_causal_lm` (``AutoModelForCausalLM`` + ``AutoTokenizer``), once
per ``(name, device, dtype)`` and process, in eval mode without gradients.  Metrics keep no
reference to the model (so cloning/pickling a metric never copies it), and metrics with the same
model name share one model object.  No network is needed when the model is in the local Hugging
Face cache (set ``HF_HUB_OFFLINE=1``) or when a local directory is given.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from dllm_lit import checks

__all__ = [
    "LanguageModelMixin",
    "ModelNotAvailableError",
    "check_device",
    "check_model_name",
    "clear_model_cache",
    "load_causal_lm",
    "max_positions",
    "resolve_dtype",
]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

# (name_or_path, device, dtype) -> (model, tokenizer); shared by all metrics of the process.
_MODEL_CACHE: dict[tuple[str, str, str], tuple[Any, Any]] = {}


class ModelNotAvailableError(OSError):
    """A Hugging Face model or tokenizer could not be loaded (no network, wrong name or path)."""


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    """``None`` -> float32; a torch dtype or its name (``"bfloat16"``, ``"torch.float16"``) among the supported ones."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"`dtype` must be one of {sorted(_DTYPES)} or None, got {dtype}")
        return dtype
    if isinstance(dtype, str):
        return _DTYPES[checks.choice("`dtype`", dtype.removeprefix("torch."), sorted(_DTYPES))]
    raise ValueError(f"`dtype` must be a torch.dtype, one of {sorted(_DTYPES)}, or None; got {dtype!r}")


def check_device(device: torch.device | str | None) -> torch.device | None:
    """``None`` or a valid torch device."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"`device` must be None or a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err


def check_model_name(name: str, value: str | os.PathLike[str]) -> str:
    """A non-empty hub id or path, as a str."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(f"{name} must be a non-empty hub id or path, got {value!r}")
    return os.fspath(value)


def load_causal_lm(
    name_or_path: str | os.PathLike[str], device: torch.device | str = "cpu", dtype: torch.dtype | str | None = None
) -> tuple[Any, Any]:
    """Load (once per process) a Hugging Face causal LM and its tokenizer, in eval mode.

    Args:
        name_or_path: hub id (e.g. ``"gpt2-large"``) or local directory with ``config.json``,
            weights and tokenizer files.
        device: device to put the model on.
        dtype: parameter dtype (``None`` = float32).

    Returns:
        ``(model, tokenizer)``; the model has ``requires_grad=False`` on all parameters.

    Raises:
        ModelNotAvailableError: the model or tokenizer cannot be loaded; the message names the
            model and explains how to make it available offline.
    """
    name = os.fspath(name_or_path)
    torch_dtype = resolve_dtype(dtype)
    dev = torch.device(device)
    key = (name, str(dev), str(torch_dtype))
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype)
    except (OSError, ValueError) as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
        raise ModelNotAvailableError(
            f"Could not load the Hugging Face causal LM / tokenizer {name!r} "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). "
            "To use it without network access, either pre-download it on a machine with internet "
            f"(e.g. `huggingface-cli download {name}` or `AutoModelForCausalLM.from_pretrained({name!r})` "
            "and `AutoTokenizer.from_pretrained(...)`, which fill the HF cache at $HF_HOME, default "
            "~/.cache/huggingface) and run with HF_HUB_OFFLINE=1, or pass a local directory holding "
            "config.json, the weights and the tokenizer files (as written by `save_pretrained`)."
            + ("" if offline else " (HF_HUB_OFFLINE is not set, so a hub download was attempted.)")
        ) from err
    check_tokenizer(name, tokenizer)
    model.eval().requires_grad_(False)
    model.to(dev)
    _MODEL_CACHE[key] = (model, tokenizer)
    return model, tokenizer


#: files one of which a local model directory needs for its tokenizer (as ``save_pretrained`` writes them)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "spiece.model",
                    "tokenizer.model", "sentencepiece.bpe.model")


def check_tokenizer(name: str, tokenizer: Any) -> None:
    """Refuse a tokenizer that cannot split text (a model folder saved without its tokenizer files).

    Without them ``AutoTokenizer`` can fall back to an empty vocabulary that maps every text to the
    unknown token, and every GenPPL / MAUVE value would be silently meaningless.
    """
    if os.path.isdir(name) and not any(os.path.exists(os.path.join(name, f)) for f in _TOKENIZER_FILES):
        raise ModelNotAvailableError(
            f"the model folder {name!r} has no tokenizer files ({', '.join(_TOKENIZER_FILES[:3])}, ...); "
            "save the tokenizer beside the model (tokenizer.save_pretrained(folder))")
    ids = tokenizer("the quick brown fox jumps over the lazy dog", add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    if len(set(ids)) < 2 or (unk is not None and all(i == unk for i in ids)):
        raise ModelNotAvailableError(
            f"the tokenizer of {name!r} maps ordinary English text to {len(set(ids))} distinct token(s); "
            "it is not a usable tokenizer for this model (is the folder missing its tokenizer files?)")


def clear_model_cache() -> None:
    """Drop every model loaded by :func:`load_causal_lm` in this process."""
    _MODEL_CACHE.clear()


def max_positions(model: Any) -> int | None:
    """The model's context length (``n_positions`` / ``max_position_embeddings`` / ``n_ctx``), if it has one."""
    cfg = model.config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class LanguageModelMixin:
    """For metrics that run a causal LM: lazy, cached loading on the metric's (or the given) device.

    Subclasses set ``model_name_or_path``, ``_lm_device`` (None = the metric's device), ``_lm_dtype``
    and ``_max_length`` (the truncation length, checked against the model's context).
    """

    model_name_or_path: str
    _lm_device: torch.device | None
    _lm_dtype: torch.dtype
    _max_length: int

    def _model_device(self) -> torch.device:
        return self._lm_device if self._lm_device is not None else self.device  # type: ignore[attr-defined]

    def _load(self) -> tuple[Any, Any]:
        model, tokenizer = load_causal_lm(self.model_name_or_path, self._model_device(), self._lm_dtype)
        limit = max_positions(model)
        if limit is not None and self._max_length > limit:
            raise ValueError(
                f"max length {self._max_length} exceeds the {limit} positions of model "
                f"{self.model_name_or_path!r}; pass a value <= {limit}"
            )
        return model, tokenizer
