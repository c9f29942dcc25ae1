r"""MAUVE (Pillutla et al., 2021) between generated and reference texts (paper Appendix "External
Language-Model Metrics"; see ``docs/metrics.md``): ``gpt2-large`` features,
``max_text_length=1024`` and ``num_buckets=25`` in the paper; the reference set is the ground-truth
chain's own samples decoded to text.  Features and score: :mod:`dllm_lit.metrics.functional.mauve`.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit import checks
from dllm_lit.corpus.cache import CacheEntryError, SettingsCache
from dllm_lit.util.hashing import canonical_json, sha256_text
from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin
from dllm_lit.metrics.functional.mauve import featurize_texts, mauve_from_features
from dllm_lit.metrics.functional.text import check_texts
from dllm_lit.metrics.lm_loading import LanguageModelMixin, check_device, check_model_name, resolve_dtype

__all__ = ["REFERENCE_CACHE_KIND", "MauveScore", "reference_cache_settings"]

#: entry kind of the reference features in the :class:`~dllm_lit.corpus.cache.SettingsCache`
REFERENCE_CACHE_KIND = "mauve_reference"
_FEATURES_FILE = "features.pt"


def reference_cache_settings(featurizer: str, max_text_length: int, dtype: torch.dtype, texts: Sequence[str]) -> dict[str, Any]:
    """Settings identifying reference features: featurizer name, max length, dtype and the texts' sha256."""
    return {
        "version": 1,
        "featurizer": featurizer,
        "max_text_length": max_text_length,
        "dtype": str(dtype),
        "num_texts": len(texts),
        "texts_sha256": sha256_text(canonical_json(list(texts))),
    }


class MauveScore(LanguageModelMixin, TypedCatStateMixin, Metric):
    r"""MAUVE between the generated texts and ``reference_texts`` (see the module docstring).

    The generated texts are featurised in ``update`` on each process (with the same model object
    as a :class:`~dllm_lit.metrics.genppl.GenerativePerplexity` of the same name), the features are
    gathered over processes and MAUVE is computed on the full set in ``compute``.  The reference
    features are computed once and kept in memory, and -- with ``cache_dir`` -- in the project's
    checksummed :class:`~dllm_lit.corpus.cache.SettingsCache` under ``<cache_dir>/mauve_reference/``,
    keyed by (featurizer, max length, dtype, reference texts); a corrupt or partial entry is
    reported with a warning and rebuilt.  The key uses the featurizer *name*: if the weights at a
    local path change, clear the cache.

    Args:
        reference_texts: texts from the reference distribution (the ground-truth chain's samples
            decoded to text); may be ``None`` and set later by :meth:`set_reference_texts`.
        featurizer: Hugging Face causal LM id or local directory (paper: ``"gpt2-large"``).
        max_text_length: truncation length in featurizer tokens (paper: 1024).
        num_buckets: k-means histogram size (paper: 25) or ``"auto"`` (= max(2, round(min(|P|,|Q|)/10))).
        batch_size: texts per featurizer forward pass.
        device, dtype: as in :class:`~dllm_lit.metrics.genppl.GenerativePerplexity`.
        cache_dir: root of the on-disk reference-feature cache (``None``: memory only).
        seed: k-means seed passed to ``mauve.compute_mauve`` (mauve's default 25).
        kmeans_num_redo, kmeans_max_iter, kmeans_explained_var, pca_max_data,
        divergence_curve_discretization_size, mauve_scaling_factor: passed to
        ``mauve.compute_mauve`` (its defaults).
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    After ``compute``, ``last_result`` holds mauve's full output (``mauve_star``,
    ``frontier_integral``, histograms, divergence curve).

    Interval: none (see :attr:`interval_policy`).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    interval_policy = IntervalPolicy(None, reason="every bootstrap resample would need its own k-means quantisation")

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
        self.model_name_or_path = check_model_name("`featurizer`", featurizer)
        self.max_text_length = checks.integer("`max_text_length`", max_text_length)
        self._max_length = max_text_length
        if num_buckets != "auto" and (
            not isinstance(num_buckets, int) or isinstance(num_buckets, bool) or num_buckets < 2
        ):
            raise ValueError(f"`num_buckets` must be an integer >= 2 or 'auto', got {num_buckets!r}")
        self.num_buckets = num_buckets
        self.batch_size = checks.integer("`batch_size`", batch_size)
        self._lm_device = check_device(device)
        self._lm_dtype = resolve_dtype(dtype)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.seed = checks.integer("`seed`", seed, minimum=0)
        self.mauve_kwargs: dict[str, Any] = {
            "kmeans_num_redo": checks.integer("`kmeans_num_redo`", kmeans_num_redo),
            "kmeans_max_iter": checks.integer("`kmeans_max_iter`", kmeans_max_iter),
            "kmeans_explained_var": checks.real("`kmeans_explained_var`", kmeans_explained_var, 0.0, 1.0,
                                                low_open=True, high_open=True),
            "pca_max_data": checks.integer("`pca_max_data`", pca_max_data, minimum=-1),
            "divergence_curve_discretization_size": checks.integer(
                "`divergence_curve_discretization_size`", divergence_curve_discretization_size
            ),
            "mauve_scaling_factor": checks.real("`mauve_scaling_factor`", mauve_scaling_factor, 0.0, low_open=True),
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
        self._reference_texts = check_texts(reference_texts, "reference_texts")
        self._reference_features = None

    def featurize(self, texts: Sequence[str]) -> Tensor:
        """Final-layer hidden state of the last token of every non-empty text, ``float32[n, d]`` on CPU."""
        texts = check_texts(texts, allow_empty=True)
        model, tokenizer = self._load()
        return featurize_texts(model, tokenizer, texts, self.max_text_length, self.batch_size)

    def _featurize_reference(self) -> Tensor:
        feats = self.featurize(self._reference_texts)  # type: ignore[arg-type]
        if feats.shape[0] == 0:
            raise ValueError("`reference_texts` contain no non-empty text")
        return feats

    def _cached_reference_features(self) -> Tensor:
        cache = SettingsCache(self.cache_dir)  # type: ignore[arg-type]
        settings = reference_cache_settings(self.model_name_or_path, self.max_text_length, self._lm_dtype,
                                            self._reference_texts)  # type: ignore[arg-type]
        entry = cache.path(REFERENCE_CACHE_KIND, settings)
        if entry.exists():
            try:
                cache.verify(entry, REFERENCE_CACHE_KIND, settings)
            except CacheEntryError as err:
                warnings.warn(f"MAUVE reference-feature cache {entry} is corrupt or stale ({err}); recomputing it",
                              stacklevel=4)

        def build(tmp: Path) -> None:
            torch.save({"features": self._featurize_reference()}, tmp / _FEATURES_FILE)

        entry = cache.get_or_build(REFERENCE_CACHE_KIND, settings, build)
        feats = torch.load(entry / _FEATURES_FILE, map_location="cpu", weights_only=True)["features"]
        if not (isinstance(feats, Tensor) and feats.ndim == 2 and feats.dtype == torch.float32):
            raise RuntimeError(f"MAUVE reference-feature cache entry {entry} does not hold a float32 [R, d] tensor")
        return feats

    def reference_features(self) -> Tensor:
        """Reference features ``float32[R, d]`` (memory, then the on-disk cache, else featurise)."""
        if self._reference_texts is None:
            raise ValueError("MauveScore has no reference texts: pass `reference_texts` or call set_reference_texts()")
        if self._reference_features is None:
            self._reference_features = (
                self._featurize_reference() if self.cache_dir is None else self._cached_reference_features()
            )
        return self._reference_features

    # ------------------------------------------------------------------ metric API
    def update(self, texts: Sequence[str]) -> None:
        """Featurise a batch of generated texts (``list[str]``; empty strings are dropped)."""
        feats = self.featurize(check_texts(texts))
        self.gen_features.append(feats.reshape(-1).to(self.device))
        self.num_generated += feats.shape[0]

    def feature_arrays(self) -> tuple[Any, Any]:
        """(reference features, generated features) as float32 numpy arrays (in ``compute``: gathered)."""
        count = int(self.num_generated)
        if count == 0:
            raise EmptyMetricError(f"{type(self).__name__}.compute(): no non-empty generated text was seen")
        flat = self.gen_features
        flat = flat if isinstance(flat, Tensor) else torch.cat(flat)
        return self.reference_features().numpy(), flat.float().cpu().reshape(count, -1).numpy()

    def compute(self) -> Tensor:
        """Return MAUVE(reference, generated) as a float64 scalar in (0, 1]."""
        p, q = self.feature_arrays()
        out = mauve_from_features(p, q, self.num_buckets, self.seed, **self.mauve_kwargs)
        self.last_result = out
        return torch.tensor(float(out.mauve), dtype=torch.float64, device=self.device)
