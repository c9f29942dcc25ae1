r"""External language-model metrics on decoded texts: generative perplexity and MAUVE.

Definitions follow the paper's Appendix ``app:external_metrics`` ("External Language-Model
Metrics") and the reference implementation (``metrics_full.py``; see
``shared/reference/paper-reference-code.md`` section 4): GPT-2 Large, texts re-tokenised by the
GPT-2 tokenizer, truncated to 1024 tokens, no BOS; MAUVE with ``gpt2-large`` features,
``max_text_length=1024`` and ``num_buckets=25``; the reference set is the ground-truth chain's own
samples decoded to text.

Models are loaded with :func:`load_causal_lm` (``AutoModelForCausalLM`` + ``AutoTokenizer``), once
per ``(name, device, dtype)`` and process, in eval mode without gradients; the metrics keep no
reference to the model (so cloning/pickling a metric never copies it), and
:class:`GenerativePerplexity` and :class:`MauveScore` with the same model name share one model
object. No network is needed when the model is in the local Hugging Face cache (set
``HF_HUB_OFFLINE=1``) or when a local directory is given.
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.atomic import atomic_torch_save
from dllm_lit.metrics.bootstrap import ratio_ci
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states

__all__ = [
    "GenerativePerplexity",
    "MauveScore",
    "ModelNotAvailableError",
    "clear_model_cache",
    "load_causal_lm",
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


def _resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"`dtype` must be one of {sorted(_DTYPES)} or None, got {dtype}")
        return dtype
    if isinstance(dtype, str):
        key = dtype.removeprefix("torch.")
        if key not in _DTYPES:
            raise ValueError(f"`dtype` must be one of {sorted(_DTYPES)} or None, got {dtype!r}")
        return _DTYPES[key]
    raise ValueError(f"`dtype` must be a torch.dtype, one of {sorted(_DTYPES)}, or None; got {dtype!r}")


def _check_device(device: torch.device | str | None) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"`device` must be None or a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err


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
    torch_dtype = _resolve_dtype(dtype)
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
    model.eval().requires_grad_(False)
    model.to(dev)
    _MODEL_CACHE[key] = (model, tokenizer)
    return model, tokenizer


def clear_model_cache() -> None:
    """Drop every model loaded by :func:`load_causal_lm` in this process."""
    _MODEL_CACHE.clear()


def _max_positions(model: Any) -> int | None:
    cfg = model.config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _check_texts(texts: Sequence[str], name: str = "texts", allow_empty: bool = False) -> list[str]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValueError(f"`{name}` must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not allow_empty and len(texts) == 0:
        raise ValueError(f"`{name}` is empty; pass at least one text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"`{name}[{i}]` must be a str, got {type(text).__name__}")
    return texts


def _check_positive_int(value: int, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
    return value


def _tokenize(tokenizer: Any, texts: list[str], max_length: int, add_special_tokens: bool) -> list[list[int]]:
    """Token ids of each text, truncated to ``max_length`` (no padding)."""
    if not texts:
        return []
    enc = tokenizer(texts, add_special_tokens=add_special_tokens, truncation=True, max_length=max_length)
    return [list(ids) for ids in enc["input_ids"]]


def _padded_batches(
    token_lists: list[list[int]], indices: list[int], batch_size: int, device: torch.device
) -> Any:
    """Yield ``(idx, input_ids, attention_mask)`` for right-padded batches, longest texts first."""
    order = sorted(indices, key=lambda i: -len(token_lists[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        seqs = [torch.tensor(token_lists[i], dtype=torch.long) for i in idx]
        lengths = torch.tensor([len(s) for s in seqs])
        ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
        mask = (torch.arange(ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).long()
        yield idx, ids.to(device), mask.to(device)


class _LanguageModelMixin:
    """Shared model handling: lazy, cached loading on the metric's (or the given) device."""

    model_name_or_path: str
    _lm_device: torch.device | None
    _lm_dtype: torch.dtype
    _max_length: int

    def _model_device(self) -> torch.device:
        return self._lm_device if self._lm_device is not None else self.device  # type: ignore[attr-defined]

    def _load(self) -> tuple[Any, Any]:
        model, tokenizer = load_causal_lm(self.model_name_or_path, self._model_device(), self._lm_dtype)
        limit = _max_positions(model)
        if limit is not None and self._max_length > limit:
            raise ValueError(
                f"max length {self._max_length} exceeds the {limit} positions of model "
                f"{self.model_name_or_path!r}; pass a value <= {limit}"
            )
        return model, tokenizer


class GenerativePerplexity(_LanguageModelMixin, TypedCatStateMixin, Metric):
    r"""Generative perplexity under a pretrained causal LM (paper Appendix ``app:external_metrics``).

    Each text :math:`s` is re-tokenised by the LM's tokenizer into :math:`y^{(s)}_{1:L_s}` (no BOS or
    other special tokens added, truncated to ``max_length``); the first token has no context and is
    not scored. With :math:`\ell_s = -\sum_{t=2}^{L_s}\log p_{\mathrm{LM}}(y^{(s)}_t \mid y^{(s)}_{<t})`

    .. math::
       \mathrm{NLL} = \frac{\sum_s \ell_s}{\sum_s (L_s - 1)}, \qquad \mathrm{GenPPL} = \exp(\mathrm{NLL}) .

    This is the paper's token-level definition with the tokens that can be scored without a BOS
    (texts shorter than 2 tokens contribute nothing). Batches are right-padded with an attention
    mask, so padding does not change any score.

    Args:
        model_name_or_path: Hugging Face causal LM id or local directory (paper: ``"gpt2-large"``).
        batch_size: texts per forward pass.
        max_length: truncation length in LM tokens (paper: 1024; must not exceed the model's
            context).
        device: device of the LM; ``None`` = the metric's device (Lightning moves it with the module).
        dtype: LM parameter dtype (``None`` = float32; ``"bfloat16"``/``"float16"`` for speed). The
            NLL is accumulated in float64 from float32 log-probabilities.
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    States: ``nll_sum`` (float64) and ``token_count`` (int64), ``dist_reduce_fx="sum"``; per-text
    ``text_nll`` (float64) and ``text_tokens`` (int64) cat states for :meth:`bootstrap_ci`.
    The LM runs in ``update`` (so each process scores its own texts).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    nll_sum: Tensor
    token_count: Tensor

    _cat_state_specs = {"text_nll": (torch.float64, ()), "text_tokens": (torch.int64, ())}

    def __init__(
        self,
        model_name_or_path: str = "gpt2-large",
        batch_size: int = 8,
        max_length: int = 1024,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(model_name_or_path, (str, os.PathLike)) or not os.fspath(model_name_or_path):
            raise ValueError(f"`model_name_or_path` must be a non-empty hub id or path, got {model_name_or_path!r}")
        self.model_name_or_path = os.fspath(model_name_or_path)
        self.batch_size = _check_positive_int(batch_size, "batch_size")
        if _check_positive_int(max_length, "max_length") < 2:
            raise ValueError(f"`max_length` must be >= 2 (the first token is not scored), got {max_length}")
        self.max_length = max_length
        self._max_length = max_length
        self._lm_device = _check_device(device)
        self._lm_dtype = _resolve_dtype(dtype)
        self.add_state("nll_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("token_count", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("text_nll", default=[], dist_reduce_fx="cat")
        self.add_state("text_tokens", default=[], dist_reduce_fx="cat")

    @torch.no_grad()
    def score_texts(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Per-text summed NLL :math:`\\ell_s` (float64, nats) and scored-token count :math:`L_s-1`."""
        texts = _check_texts(texts)
        model, tokenizer = self._load()
        token_lists = _tokenize(tokenizer, texts, self.max_length, add_special_tokens=False)
        nll = torch.zeros(len(texts), dtype=torch.float64)
        count = torch.zeros(len(texts), dtype=torch.int64)
        scorable = [i for i, ids in enumerate(token_lists) if len(ids) >= 2]
        dev = next(model.parameters()).device
        for idx, ids, mask in _padded_batches(token_lists, scorable, self.batch_size, dev):
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            target, target_mask = ids[:, 1:], mask[:, 1:]
            token_nll = F.cross_entropy(logits.transpose(1, 2), target, reduction="none") * target_mask
            nll[idx] = token_nll.double().sum(dim=1).cpu()
            count[idx] = target_mask.sum(dim=1).cpu()
        return nll, count

    def update(self, texts: Sequence[str]) -> None:
        """Score a batch of decoded texts (``list[str]``)."""
        nll, count = self.score_texts(texts)
        nll, count = nll.to(self.device), count.to(self.device)
        self.nll_sum += nll.sum()
        self.token_count += count.sum()
        self.text_nll.append(nll)
        self.text_tokens.append(count)

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{GenPPL}` (float64 scalar)."""
        if int(self.token_count) == 0:
            raise EmptyMetricError(
                f"{type(self).__name__}.compute(): no scorable token (call update() with texts of >= 2 LM tokens)"
            )
        return torch.exp(self.nll_sum / self.token_count.double())

    def bootstrap_ci(
        self, num_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
    ) -> tuple[float, float]:
        r"""Percentile-bootstrap CI of GenPPL resampling texts: ``exp`` of the CI of
        :math:`\sum_s w_s \ell_s / \sum_s w_s (L_s-1)`. Collective under DDP."""
        with synced_cat_states(self, {"text_nll": torch.float64, "text_tokens": torch.int64}) as st:
            nll, count = st["text_nll"], st["text_tokens"]
        if int(count.sum()) == 0:
            raise EmptyMetricError(f"{type(self).__name__}.bootstrap_ci(): no scorable token seen")
        return ratio_ci(nll, count, num_resamples=num_resamples, confidence=confidence, seed=seed, transform=math.exp)


def reference_cache_key(featurizer: str, max_text_length: int, dtype: torch.dtype, texts: Sequence[str]) -> str:
    """sha256 identifying the reference features: featurizer name, max length, dtype and texts."""
    h = hashlib.sha256()
    h.update(b"dllm_lit.mauve.reference_features.v1\0")
    for part in (featurizer, str(max_text_length), str(dtype), str(len(texts))):
        h.update(part.encode("utf-8") + b"\0")
    for text in texts:
        data = text.encode("utf-8", errors="surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _tensor_digest(t: Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


class MauveScore(_LanguageModelMixin, TypedCatStateMixin, Metric):
    r"""MAUVE (Pillutla et al., 2021) between generated and reference texts (paper Appendix
    ``app:external_metrics``).

    Both text sets are embedded by the featurizer LM -- the final-layer hidden state of the last
    token, :math:`\phi(s) = h^{(\mathrm{last})}_{L_s}(y^{(s)}_{1:L_s})`, exactly as
    ``mauve.compute_mauve`` featurises (tokenizer defaults, truncation to ``max_text_length``,
    empty texts dropped) -- and quantised jointly by k-means into ``num_buckets`` histograms
    :math:`P` (reference) and :math:`Q` (generated). With :math:`R_\lambda=\lambda P+(1-\lambda)Q`
    and scaling constant :math:`c`, the divergence curve is

    .. math::
       \mathcal{C}(P,Q) = \bigl\{\bigl(e^{-c\,\mathrm{KL}(Q\|R_\lambda)},\,
                           e^{-c\,\mathrm{KL}(P\|R_\lambda)}\bigr) : \lambda\in(0,1)\bigr\},

    and :math:`\mathrm{MAUVE}(P,Q)\in(0,1]` is the area under it (computed by
    ``mauve.compute_mauve`` from the features given here).

    The generated texts are featurised in ``update`` on each process (with the same model object
    as a :class:`GenerativePerplexity` of the same name), the features are gathered over processes
    and MAUVE is computed on the full set in ``compute``. The reference features are computed once
    and kept in memory, and -- with ``cache_dir`` -- on disk under a sha256 key of
    (featurizer, max length, dtype, reference texts), written atomically (temporary file +
    ``os.replace``) and verified by a content checksum on load (a corrupt file is recomputed).
    The key uses the featurizer *name*: if the weights at a local path change, clear the cache.

    Args:
        reference_texts: texts from the reference distribution (the ground-truth chain's samples
            decoded to text); may be ``None`` and set later by :meth:`set_reference_texts`.
        featurizer: Hugging Face causal LM id or local directory (paper: ``"gpt2-large"``).
        max_text_length: truncation length in featurizer tokens (paper: 1024).
        num_buckets: k-means histogram size (paper: 25) or ``"auto"`` (= max(2, round(min(|P|,|Q|)/10))).
        batch_size: texts per featurizer forward pass.
        device, dtype: as in :class:`GenerativePerplexity`.
        cache_dir: directory for the on-disk reference-feature cache (``None``: memory only).
        seed: k-means seed passed to ``mauve.compute_mauve`` (mauve's default 25).
        kmeans_num_redo, kmeans_max_iter, kmeans_explained_var, pca_max_data,
        divergence_curve_discretization_size, mauve_scaling_factor: passed to
        ``mauve.compute_mauve`` (its defaults).
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    After ``compute``, ``last_result`` holds mauve's full output (``mauve_star``,
    ``frontier_integral``, histograms, divergence curve).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    num_generated: Tensor

    # features are stored flattened so that an empty rank needs no knowledge of the hidden size
    _cat_state_specs = {"gen_features": (torch.float32, ())}

    def __init__(
        self,
        reference_texts: Sequence[str] | None = None,
        featurizer: str = "gpt2-large",
        max_text_length: int = 1024,
        num_buckets: int | Literal["auto"] = 25,
        batch_size: int = 8,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        seed: int = 25,
        kmeans_num_redo: int = 5,
        kmeans_max_iter: int = 500,
        kmeans_explained_var: float = 0.9,
        pca_max_data: int = -1,
        divergence_curve_discretization_size: int = 25,
        mauve_scaling_factor: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(featurizer, (str, os.PathLike)) or not os.fspath(featurizer):
            raise ValueError(f"`featurizer` must be a non-empty hub id or path, got {featurizer!r}")
        self.model_name_or_path = os.fspath(featurizer)
        self.max_text_length = _check_positive_int(max_text_length, "max_text_length")
        self._max_length = max_text_length
        if num_buckets != "auto" and (
            not isinstance(num_buckets, int) or isinstance(num_buckets, bool) or num_buckets < 2
        ):
            raise ValueError(f"`num_buckets` must be an integer >= 2 or 'auto', got {num_buckets!r}")
        self.num_buckets = num_buckets
        self.batch_size = _check_positive_int(batch_size, "batch_size")
        self._lm_device = _check_device(device)
        self._lm_dtype = _resolve_dtype(dtype)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"`seed` must be an integer, got {seed!r}")
        self.seed = seed
        if not 0.0 < kmeans_explained_var < 1.0:
            raise ValueError(f"`kmeans_explained_var` must lie in (0, 1), got {kmeans_explained_var!r}")
        self.mauve_kwargs: dict[str, Any] = {
            "kmeans_num_redo": _check_positive_int(kmeans_num_redo, "kmeans_num_redo"),
            "kmeans_max_iter": _check_positive_int(kmeans_max_iter, "kmeans_max_iter"),
            "kmeans_explained_var": float(kmeans_explained_var),
            "pca_max_data": int(pca_max_data),
            "divergence_curve_discretization_size": _check_positive_int(
                divergence_curve_discretization_size, "divergence_curve_discretization_size"
            ),
            "mauve_scaling_factor": float(mauve_scaling_factor),
        }
        self._reference_texts: list[str] | None = None
        self._reference_features: Tensor | None = None
        self.last_result: Any = None
        if reference_texts is not None:
            self.set_reference_texts(reference_texts)
        self.add_state("gen_features", default=[], dist_reduce_fx="cat")
        self.add_state("num_generated", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    # ------------------------------------------------------------------ features
    def set_reference_texts(self, reference_texts: Sequence[str]) -> None:
        """Set (or replace) the reference texts; their features are computed lazily."""
        self._reference_texts = _check_texts(reference_texts, "reference_texts")
        self._reference_features = None

    @torch.no_grad()
    def featurize(self, texts: Sequence[str]) -> Tensor:
        """Final-layer hidden state of the last token of every non-empty text, ``float32[n, d]`` on CPU."""
        texts = _check_texts(texts, allow_empty=True)
        model, tokenizer = self._load()
        token_lists = _tokenize(tokenizer, texts, self.max_text_length, add_special_tokens=True)
        keep = [i for i, ids in enumerate(token_lists) if len(ids) > 0]
        hidden = model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.n_embd
        feats = torch.zeros(len(keep), hidden, dtype=torch.float32)
        position = {i: k for k, i in enumerate(keep)}
        dev = next(model.parameters()).device
        backbone = model.base_model
        for idx, ids, mask in _padded_batches(token_lists, keep, self.batch_size, dev):
            out = backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True, return_dict=True)
            last = out.hidden_states[-1]
            lengths = mask.sum(dim=1)
            rows = last[torch.arange(last.shape[0], device=last.device), lengths - 1]
            feats[[position[i] for i in idx]] = rows.float().cpu()
        return feats

    def _cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"mauve_reference_{key}.pt"

    def _read_cache(self, path: Path, key: str) -> Tensor | None:
        if not path.is_file():
            return None
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            feats = payload["features"]
            ok = (
                isinstance(payload, dict)
                and payload.get("key") == key
                and isinstance(feats, Tensor)
                and feats.ndim == 2
                and feats.dtype == torch.float32
                and payload.get("sha256") == _tensor_digest(feats)
            )
        except Exception:  # noqa: BLE001 - any unreadable file is treated as corrupt
            ok = False
        if not ok:
            warnings.warn(f"MAUVE reference-feature cache {path} is corrupt or stale; recomputing it", stacklevel=3)
            return None
        return feats

    @staticmethod
    def _write_cache(path: Path, key: str, feats: Tensor) -> None:
        atomic_torch_save({"key": key, "features": feats, "sha256": _tensor_digest(feats)}, path)

    def reference_features(self) -> Tensor:
        """Reference features ``float32[R, d]`` (memory cache, then disk cache, else featurise)."""
        if self._reference_texts is None:
            raise ValueError("MauveScore has no reference texts: pass `reference_texts` or call set_reference_texts()")
        if self._reference_features is not None:
            return self._reference_features
        key = reference_cache_key(self.model_name_or_path, self.max_text_length, self._lm_dtype, self._reference_texts)
        path = self._cache_path(key)
        feats = self._read_cache(path, key) if path is not None else None
        if feats is None:
            feats = self.featurize(self._reference_texts)
            if feats.shape[0] == 0:
                raise ValueError("`reference_texts` contain no non-empty text")
            if path is not None:
                self._write_cache(path, key, feats)
        self._reference_features = feats
        return feats

    # ------------------------------------------------------------------ metric API
    def update(self, texts: Sequence[str]) -> None:
        """Featurise a batch of generated texts (``list[str]``; empty strings are dropped)."""
        feats = self.featurize(_check_texts(texts))
        self.gen_features.append(feats.reshape(-1).to(self.device))
        self.num_generated += feats.shape[0]

    def compute(self) -> Tensor:
        """Return MAUVE(reference, generated) as a float64 scalar in (0, 1]."""
        import mauve

        count = int(self.num_generated)
        if count == 0:
            raise EmptyMetricError(f"{type(self).__name__}.compute(): no non-empty generated text was seen")
        flat = self.gen_features
        flat = flat if isinstance(flat, Tensor) else torch.cat(flat)
        q = flat.float().cpu().reshape(count, -1).numpy()
        p = self.reference_features().numpy()
        if p.shape[1] != q.shape[1]:
            raise RuntimeError(f"feature sizes differ: reference {p.shape[1]} vs generated {q.shape[1]}")
        buckets = self.num_buckets
        if buckets != "auto" and buckets > p.shape[0] + q.shape[0]:
            raise ValueError(
                f"`num_buckets`={buckets} exceeds the {p.shape[0] + q.shape[0]} texts "
                f"({p.shape[0]} reference + {q.shape[0]} generated); use fewer buckets or 'auto'"
            )
        out = mauve.compute_mauve(p_features=p, q_features=q, num_buckets=buckets, seed=self.seed, **self.mauve_kwargs)
        self.last_result = out
        return torch.tensor(float(out.mauve), dtype=torch.float64, device=self.device)
