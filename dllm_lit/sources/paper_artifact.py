"""Ground-truth files released by the paper's authors: the chain (:class:`PaperArtifact`,
:func:`load_paper_artifact`) and reference-sample packs (:func:`load_reference_samples`).

Paper artifact: a ``torch.save`` dict with ``nbr_idx[V,K]``, ``nbr_prob[V,K]``, ``nu[V]``, ``eps``,
``pi[V]`` (aliases ``pi_stationary``, ``teleport_eps``, ``unigram`` for ``nu``), optionally a dense
``P`` / ``P_prime_dense``, ``itos``/``vocab``, ``samples[N,T]`` and ``config``.  Reference-sample packs
hold ``gt_samples_ids[N,T]``.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from dllm_lit.markov import ChainError, MarkovChain
from dllm_lit.util.safe_load import load_failure
from dllm_lit.sources.base import ChainSource, IdDecoder, TextDecoder

__all__ = ["PaperArtifact", "load_paper_artifact", "load_reference_samples"]


class PaperArtifact(ChainSource):
    """A ground-truth ``.pt`` released by the paper's authors (format in the module docstring).

    ``trust_pickle=True`` allows full unpickling of files that hold non-tensor objects (only for files
    from a trusted source).  Token ids decode through the file's ``itos`` when it has one.
    """

    example_init_args = {"path": "artifact.pt"}

    def __init__(self, path: str, trust_pickle: bool = False) -> None:
        self.path, self.trust_pickle = path, trust_pickle

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain, self._extras = load_paper_artifact(self.path, trust_pickle=self.trust_pickle)
        return self._chain

    def decoder(self) -> TextDecoder:
        return IdDecoder(self._chain.vocab_size, self._extras.get("itos"))


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def load_paper_artifact(path: str | Path, trust_pickle: bool = False) -> tuple[MarkovChain, dict[str, Any]]:
    """Load a ground-truth ``.pt`` file released with the paper (format in the module docstring).

    Returns ``(chain, extras)`` where extras may hold ``itos`` (list of token strings), ``samples``
    (the authors' reference chain samples) and ``config``.  The released ``pi`` came from 500
    power iterations; it is replaced by a converged stationary law, and a warning reports the
    L1 gap when it exceeds 1e-6.  ``trust_pickle=True`` allows full unpickling of files that
    hold non-tensor objects (only for files from a trusted source).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"paper artifact not found: {path} (set --data.source.init_args.path to the authors' .pt file)")
    try:
        d = torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except Exception as exc:
        reason = load_failure(path, exc, not trust_pickle)
        # only a valid pickle that holds non-tensor objects would load with full unpickling; a damaged or foreign
        # file would not, so it gets no suggestion to lower the guard
        if not trust_pickle and reason.startswith("it holds objects"):
            raise ChainError(f"cannot read paper artifact {path}: {reason}; if the file is from a trusted source, "
                             "set --data.source.init_args.trust_pickle true") from None
        raise ChainError(f"cannot read paper artifact {path}: not a torch.save file of tensors ({reason})") from None
    if not isinstance(d, dict):
        raise ChainError(f"{path}: expected a dict artifact, got {type(d).__name__}")
    eps = float(_first(d, "eps", "teleport_eps") or 0.0)
    nbr_idx, nbr_prob = _first(d, "nbr_idx"), _first(d, "nbr_prob")
    nu = _first(d, "nu", "unigram")
    meta = {"source": "paper_artifact", "path": str(path)}
    if isinstance(d.get("config"), dict):
        meta["paper_config"] = json.loads(json.dumps(d["config"], default=str))
    if nbr_idx is not None and nbr_prob is not None:
        nbr_prob = torch.as_tensor(nbr_prob, dtype=torch.float64)
        nbr_prob = nbr_prob / nbr_prob.sum(1, keepdim=True)  # released in float32: renormalise in float64
        if nu is not None:
            nu = torch.as_tensor(nu, dtype=torch.float64)
            nu = nu / nu.sum()
        chain = MarkovChain(nbr_idx, nbr_prob, eps=eps, nu=nu, metadata=meta)
    else:
        P = _first(d, "P", "P_prime_dense")
        if P is None:
            raise ChainError(f"{path}: artifact has neither nbr_idx/nbr_prob nor a dense P / P_prime_dense")
        P = torch.as_tensor(P, dtype=torch.float64)
        chain = MarkovChain.from_kernel(P / P.sum(1, keepdim=True), metadata=meta)
    pi_released = _first(d, "pi", "pi_stationary")
    if pi_released is not None:
        gap = (torch.as_tensor(pi_released, dtype=torch.float64) - chain.stationary).abs().sum().item()
        if gap > 1e-6:
            warnings.warn(f"{path}: released pi differs from the converged stationary law by {gap:.3g} in L1; using the converged one")
    extras: dict[str, Any] = {}
    itos = _first(d, "itos", "vocab")
    if itos is not None:
        extras["itos"] = list(itos)
    samples = _first(d, "samples")
    if samples is not None:
        extras["samples"] = torch.as_tensor(samples).long()
    if "config" in d:
        extras["config"] = d["config"]
    return chain, extras


def load_reference_samples(path: str | Path, vocab_size: int | None = None) -> torch.Tensor:
    """Load a reference-sample pack ``{gt_samples_ids[N,T], ...}`` (or a bare LongTensor) as int64 [N, T]."""
    d = torch.load(Path(path), map_location="cpu", weights_only=True)
    x = d if isinstance(d, torch.Tensor) else _first(d, "gt_samples_ids", "samples")
    if x is None:
        raise ChainError(f"{path}: no gt_samples_ids or samples tensor found")
    x = torch.as_tensor(x).long()
    if x.dim() != 2:
        raise ChainError(f"{path}: reference samples must be [N, T], got {tuple(x.shape)}")
    if vocab_size is not None and (x.min() < 0 or x.max() >= vocab_size):
        raise ChainError(f"{path}: reference sample ids must lie in [0, {vocab_size})")
    return x
