"""Learned denoisers (a masked LM), behind the same interface as the oracle.

A learned denoiser wraps a model that maps token ids [B, T] to logits [B, T, >= V].  It sees the
chain's token ids with MASK (id V) mapped to the model's mask token, takes the first V logits
(the chain's vocabulary) and applies MDLM's SUBS parameterisation (Sahoo et al., arXiv:2406.07524):
log-softmax over the real vocabulary at masked positions (no mass on MASK), one-hot at unmasked
positions (carry-over).  Swapping it for :class:`~dllm_lit.denoisers.OracleDenoiser` in a sampler
measures denoiser + sampler error; the difference to the oracle run isolates the denoiser's share.

Two loaders share :class:`LearnedDenoiser`:

* :class:`HFDenoiser` - a Hugging Face masked-LM directory or hub name (``AutoModelForMaskedLM``);
* :class:`~dllm_lit.denoisers.checkpoint.CheckpointDenoiser` - a Lightning ``.ckpt`` written by
  ``python cli.py fit --config configs/train_denoiser.yaml``.

    model:
      class_path: dllm_lit.samplers.MDLM
      init_args:
        denoiser:
          class_path: dllm_lit.denoisers.HFDenoiser
          init_args: {model_name_or_path: /path/to/checkpoint}

The vocabulary size V is taken from the chain when the run is wired.  Checkpoints trained by
dllm_lit record the fingerprint of their training chain (:func:`chain_fingerprint`); binding one
to a different chain is refused (``allow_other_chain: true`` turns that into a warning).

Cost.  Samplers query ``probs_at(z, b, p)`` with the positions of one step.  The denoiser keeps a
per-row cache of the last state it evaluated and its output: a row is run through the model only
when its tokens changed since the last query, so every sampler does at most one (batched) forward
per changed state.  On CPU, small forwards run with one intra-op thread (``cpu_threads``): an
OpenMP parallel region costs more than a tiny GEMM saves, and far more when the cores are shared.

KV caches.  ``cache`` (default "none": the model's own forward, unchanged) selects an approximation that reuses
keys and values between calls (:mod:`dllm_lit.denoisers.kv_cache`: Fast-dLLM's prefix and dual caches, dKV-Cache's
delayed caching, an attention-drift layer refresh), with ``refresh_interval`` (None, or every r-th call a full
forward) and ``drift_threshold`` (adaptive).  It needs a model whose keys and values can be read
(:func:`dllm_lit.denoisers.kv_stack.kv_stack`); the block policies need a sampler that announces its blocks.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import warnings
from typing import TYPE_CHECKING, Any

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser, check_tokens
from dllm_lit.denoisers.kv_cache import BLOCK_POLICIES, POLICIES, KVCache

if TYPE_CHECKING:
    from dllm_lit.markov.chain import MarkovChain

__all__ = ["HFDenoiser", "LearnedDenoiser", "DenoiserLoadError", "DenoiserMismatchError", "chain_fingerprint",
           "SMALL_FORWARD_TOKENS"]

#: forwards on CPU with at most this many tokens run with ``cpu_threads`` intra-op threads
SMALL_FORWARD_TOKENS = 16384

#: config attribute under which dllm_lit records the training chain's fingerprint in an HF export
FINGERPRINT_KEY = "dllm_lit_chain_fingerprint"


class DenoiserLoadError(OSError):
    """A denoiser checkpoint cannot be loaded (missing path, not a masked LM, unreadable file)."""


class DenoiserMismatchError(ValueError):
    """A denoiser does not fit the chain (vocabulary, mask id or training chain)."""


def chain_fingerprint(chain: "MarkovChain") -> str:
    """The chain's :attr:`~dllm_lit.markov.MarkovChain.fingerprint` (kept as a function for checkpoint code)."""
    return chain.fingerprint


class LearnedDenoiser(Denoiser):
    """A masked LM ``self.model`` behind the denoiser interface (SUBS, row cache; see module docstring).

    Subclasses load ``self.model`` (any module whose output has ``.logits`` or is the logits tensor)
    and may set ``self.trained_on`` (the training chain's fingerprint) and ``self.source`` (for messages).
    """

    def __init__(self, mask_token_id: int | None = None, batch_size: int = 64, allow_other_chain: bool = False,
                 cpu_threads: int | None = 1, cache: str = "none", refresh_interval: int | None = None,
                 drift_threshold: float = 0.1) -> None:
        super().__init__()
        self.mask_token_id = checks.optional_integer("mask_token_id", mask_token_id, minimum=0)
        self.batch_size = checks.integer("batch_size", batch_size)
        self.allow_other_chain = checks.boolean("allow_other_chain", allow_other_chain)
        self.cpu_threads = checks.optional_integer("cpu_threads", cpu_threads)
        self.cache = checks.choice("cache", cache, POLICIES)
        self.refresh_interval = checks.optional_integer("refresh_interval", refresh_interval, minimum=1)
        self.drift_threshold = checks.real("drift_threshold", drift_threshold, 0.0, 2.0, low_open=True)
        self._kv: KVCache | None = None
        self.trained_on: str | None = None
        self.source: str = type(self).__name__
        self.vocab_size = None
        self._cache_z: torch.Tensor | None = None
        self._cache_out: torch.Tensor | None = None
        self._cache_valid: torch.Tensor | None = None
        #: forward passes run (rows through the model), for tests and benchmarks
        self.forward_calls = 0
        self.rows_evaluated = 0

    # ------------------------------------------------------------------ wiring
    @property
    def model_mask_id(self) -> int:
        """The id the model reads at masked positions (default: V, the chain's MASK id)."""
        return self.mask_id if self.mask_token_id is None else int(self.mask_token_id)

    def _model_sizes(self) -> tuple[int | None, int | None]:
        """(input ids the model reads, logits it predicts), None where unknown."""
        emb = self.model.get_input_embeddings() if hasattr(self.model, "get_input_embeddings") else None
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        in_dim = emb.weight.shape[0] if emb is not None else None
        out_dim = head.weight.shape[0] if head is not None and hasattr(head, "weight") else None
        return in_dim, out_dim

    def _check_vocabulary(self, V: int) -> None:
        """The model must predict ids [0, V) and read its mask id."""
        in_dim, out_dim = self._model_sizes()
        if out_dim is not None and out_dim < V:
            raise DenoiserMismatchError(
                f"the denoiser {self.source} predicts {out_dim} tokens but the chain has {V}; "
                "the model's vocabulary must cover the chain's token ids")
        mask = V if self.mask_token_id is None else int(self.mask_token_id)
        if in_dim is not None and mask >= in_dim:
            raise DenoiserMismatchError(
                f"the denoiser {self.source} reads {in_dim} input ids but its mask id is {mask} (chain vocabulary "
                f"{V}, MASK = {V}); set mask_token_id to the model's mask token or use a model with V + 1 = {V + 1} "
                "input ids")

    def _setup_cache(self) -> None:
        """Build the KV cache of ``cache`` (one-line ValueError when the model's keys and values cannot be read)."""
        from dllm_lit.denoisers.kv_stack import kv_stack

        if self.cache != "none" and self._kv is None:
            self._kv = KVCache(kv_stack(self.model, self.cache), self.cache, self.refresh_interval,
                               self.drift_threshold)

    @property
    def needs_blocks(self) -> str | None:
        if self.cache in BLOCK_POLICIES:
            return f"its cache={self.cache!r} keeps the keys and values outside the sampler's active block"
        return None

    def decode_start(self, batch: int) -> None:
        if self._kv is not None:
            self._kv.reset()

    def block_start(self, lo: int, hi: int) -> None:
        if self._kv is not None:
            self._kv.block_start(lo, hi)

    def bind(self, chain: "MarkovChain") -> "LearnedDenoiser":
        """Take V from the chain (or check it), check the model's sizes and the training chain's fingerprint."""
        self._setup_cache()
        self._check_vocabulary(chain.vocab_size)
        if self.trained_on is not None:
            fp = chain_fingerprint(chain)
            if fp != self.trained_on:
                msg = (f"the denoiser {self.source} was trained on another chain (fingerprint "
                       f"{self.trained_on[:12]}, this chain {fp[:12]})")
                if not self.allow_other_chain:
                    raise DenoiserMismatchError(msg + "; set allow_other_chain: true to use it anyway")
                warnings.warn(msg, stacklevel=2)
        super().bind(chain)
        self.clear_cache()
        return self

    def check_length(self, seq_len: int) -> None:
        """The model's ``max_position_embeddings`` bounds the sequence length (checked when the run is wired)."""
        limit = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        if isinstance(limit, int) and seq_len > limit:
            raise DenoiserMismatchError(
                f"the denoiser {self.source} reads at most {limit} positions, got data.seq_len={seq_len}; use "
                f"--data.seq_len {limit} or less (or train the denoiser at this length)")

    # ------------------------------------------------------------------ evaluation
    def clear_cache(self) -> None:
        """Forget the cached state (the next query runs the model; a KV cache starts afresh)."""
        self._cache_z = self._cache_out = self._cache_valid = None
        if getattr(self, "_kv", None) is not None:
            self._kv.reset()

    def _threads(self, tokens: int, device: torch.device):
        """One-thread context for small CPU forwards (see module docstring)."""
        if device.type != "cpu" or self.cpu_threads is None or tokens > SMALL_FORWARD_TOKENS:
            return contextlib.nullcontext()
        return _num_threads(self.cpu_threads)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The model's logits for token ids [B, T] (mask already mapped to the model's mask id)."""
        out = self.model(input_ids=ids)
        return out.logits if hasattr(out, "logits") else out

    @torch.no_grad()
    def _evaluate(self, z: torch.Tensor, rows: torch.Tensor | None = None, batch: int = 0) -> torch.Tensor:
        """log p(x0 | z) [B, T, V] (SUBS), ``batch_size`` rows per model call; with a KV cache, z holds rows ``rows``
        of a batch of ``batch`` rows (the cache keeps per-row state)."""
        V = self.vocab_size
        self.check_length(z.shape[1])
        masked = z == self.mask_id
        ids = torch.where(masked, torch.full_like(z, self.model_mask_id), z)
        outs = []
        with self._threads(min(z.shape[0], self.batch_size) * z.shape[1], z.device):
            for start in range(0, z.shape[0], self.batch_size):
                sl = slice(start, start + self.batch_size)
                if self._kv is None or rows is None:
                    logits = self.logits(ids[sl])[..., :V]
                else:
                    logits = self._kv.evaluate(ids[sl], masked[sl], rows[sl], batch)[..., :V]
                outs.append(torch.log_softmax(logits.float(), dim=-1))
        self.forward_calls += 1
        self.rows_evaluated += z.shape[0]
        logp = torch.cat(outs)
        onehot = torch.full_like(logp, float("-inf")).scatter_(-1, z.clamp(max=V - 1)[..., None], 0.0)
        return torch.where(masked[..., None], logp, onehot)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0 | z): Tensor[B, T, V], SUBS parameterisation; reuses cached rows whose tokens did not change."""
        check_tokens(z, self.vocab_size)
        return self._cached(z, torch.arange(z.shape[0], device=z.device))

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """Rows involved are evaluated (only if changed since the last query), then the positions gathered."""
        check_tokens(z, self.vocab_size)
        rows = torch.unique(batch_index)
        out = self._cached(z, rows)
        return out[batch_index, position_index]

    def _cached(self, z: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The cached [B, T, V] output, with ``rows`` brought up to date with z (one batched forward)."""
        B, T = z.shape
        V = self.vocab_size
        c = self._cache_z
        if c is None or c.shape != z.shape or c.device != z.device:
            self._cache_z = torch.full_like(z, -1)
            self._cache_out = torch.empty((B, T, V), dtype=torch.float32, device=z.device)
            self._cache_valid = torch.zeros(B, dtype=torch.bool, device=z.device)
        stale = rows[(~self._cache_valid[rows]) | (self._cache_z[rows] != z[rows]).any(1)]
        if stale.numel():
            self._cache_out[stale] = self._evaluate(z[stale], stale, B)
            self._cache_z[stale] = z[stale]
            self._cache_valid[stale] = True
        return self._cache_out

    def train(self, mode: bool = True) -> "LearnedDenoiser":
        self.clear_cache()  # weights may change in training: never serve a stale output
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()  # .to(device) / dtype changes
        return super()._apply(fn, *args, **kwargs)

    def cache_settings(self) -> dict[str, Any]:
        """The KV-cache options, for descriptions (empty with ``cache: none``, so today's descriptions stand)."""
        if self.cache == "none":
            return {}
        out: dict[str, Any] = {"cache": self.cache, "refresh_interval": self.refresh_interval}
        return out | ({"drift_threshold": self.drift_threshold} if self.cache == "adaptive" else {})

    def describe(self) -> dict[str, Any]:
        return {"denoiser": type(self).__name__, "source": self.source, "trained_on": self.trained_on,
                **self.cache_settings()}


@contextlib.contextmanager
def _num_threads(n: int):
    old = torch.get_num_threads()
    if old == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _looks_like_path(name: str) -> bool:
    return os.path.isabs(name) or name.startswith(("./", "../", "~")) or os.path.exists(name)


class HFDenoiser(LearnedDenoiser):
    """A Hugging Face masked LM (``AutoModelForMaskedLM``) as a denoiser.

    Args:
        model_name_or_path: hub name or local directory of the checkpoint.
        vocab_size: V, the chain's vocabulary size (default: taken from the chain at wiring); the
            model's logits must cover ids [0, V).
        mask_token_id: the model's mask id (default: the one recorded by a dllm_lit export, else id V).
        trust_remote_code: allow custom model code (e.g. MDLM/LLaDA checkpoints).
        batch_size: rows per forward pass.
        allow_other_chain: use a dllm_lit export trained on another chain (warning instead of an error).
        cpu_threads: intra-op threads for small CPU forwards (None: leave torch's setting).
        cache: "none" (the model's forward), or a KV-cache approximation: "prefix", "dual", "delayed",
            "adaptive" (:mod:`dllm_lit.denoisers.kv_cache`; docs/kv_caches.md).
        refresh_interval: with a cache, a full forward every this many calls (None: only where the policy refreshes).
        drift_threshold: ``cache: adaptive``: refresh layers l.. when 1 - cos of the attention drift exceeds it.
    """

    def __init__(self, model_name_or_path: str, vocab_size: int | None = None, mask_token_id: int | None = None,
                 trust_remote_code: bool = False, batch_size: int = 64, allow_other_chain: bool = False,
                 cpu_threads: int | None = 1, cache: str = "none", refresh_interval: int | None = None,
                 drift_threshold: float = 0.1) -> None:
        super().__init__(mask_token_id=mask_token_id, batch_size=batch_size, allow_other_chain=allow_other_chain,
                         cpu_threads=cpu_threads, cache=cache, refresh_interval=refresh_interval,
                         drift_threshold=drift_threshold)
        checks.optional_integer("vocab_size", vocab_size)
        checks.nonempty_str("model_name_or_path", model_name_or_path)
        self.model_name_or_path = str(model_name_or_path)
        self.source = repr(self.model_name_or_path)
        self.model = load_masked_lm(self.model_name_or_path, trust_remote_code=trust_remote_code)
        self.model.eval().requires_grad_(False)
        config = getattr(self.model, "config", None)
        self.trained_on = getattr(config, FINGERPRINT_KEY, None)
        if self.mask_token_id is None and getattr(config, "dllm_lit_mask_id", None) is not None:
            self.mask_token_id = int(config.dllm_lit_mask_id)
        if vocab_size is not None:
            self._check_vocabulary(vocab_size)
            self.vocab_size = vocab_size
        self._setup_cache()

    def describe(self) -> dict:
        return {"denoiser": "hf", "model_name_or_path": self.model_name_or_path, "trained_on": self.trained_on,
                **self.cache_settings()}


def load_masked_lm(name: str, trust_remote_code: bool = False):
    """``AutoModelForMaskedLM.from_pretrained(name)`` with one-line errors naming the problem (transformers' load
    report and progress bars are silenced: a weight file of other shapes is one line naming a tensor)."""
    from transformers import AutoConfig, AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    prefix = f"cannot load the denoiser checkpoint {name!r}"
    if _looks_like_path(name) and not os.path.isdir(os.path.expanduser(name)):
        raise DenoiserLoadError(f"{prefix}: no such directory")
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise DenoiserLoadError(
            f"{prefix}: {_first_line(exc)}. Without network access, download it beforehand (HF cache, then "
            "set HF_HUB_OFFLINE=1) or pass a local directory.") from None
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return AutoModelForMaskedLM.from_pretrained(name, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise DenoiserLoadError(f"{prefix}: it is not a masked language model ({type(config).__name__} has no "
                                    "AutoModelForMaskedLM class; a denoiser needs a bidirectional masked LM)") from None
        raise DenoiserLoadError(f"{prefix}: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - an unpicklable or damaged weight file, shapes that do not fit
        raise DenoiserLoadError(f"{prefix}: {_weights_problem(name, config, exc)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _weights_problem(name: str, config: Any, exc: BaseException) -> str:
    """Why the weights of ``name`` did not load, in one line: the refused pickle's globals, or a tensor whose
    shape its config does not describe, or the error's first line."""
    from dllm_lit.util.safe_load import load_failure

    pickled = os.path.join(os.path.expanduser(name), "pytorch_model.bin")
    if os.path.isfile(pickled) and (isinstance(exc, pickle.UnpicklingError) or "weights only" in str(exc).lower()):
        return f"pytorch_model.bin: {load_failure(pickled, exc)}"
    if "mismatched_sizes" in str(exc):
        detail = _first_mismatch(name, config)
        return "its weights do not have the shapes its config.json describes" + (f" ({detail})" if detail else "")
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_mismatch(name: str, config: Any) -> str:
    """``<tensor>: file [..] vs config [..]`` for the first tensor of ``name``'s safetensors files whose shape
    differs from the model its config builds (on the meta device: no memory); "" when none is found."""
    try:
        from pathlib import Path

        from safetensors import safe_open
        from transformers import AutoModelForMaskedLM

        with torch.device("meta"):
            expected = {k: list(v.shape) for k, v in AutoModelForMaskedLM.from_config(config).state_dict().items()}
        for file in sorted(Path(os.path.expanduser(name)).glob("*.safetensors")):
            with safe_open(str(file), "pt") as fh:
                for key in fh.keys():
                    shape = list(fh.get_slice(key).get_shape())
                    if key in expected and shape != expected[key]:
                        return f"{key}: file {shape} vs config {expected[key]}"
    except Exception:  # noqa: BLE001 - a best-effort detail of a message already being raised
        return ""
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
