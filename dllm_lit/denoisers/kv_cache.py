"""KV-cache approximations of a bidirectional denoiser: which positions' keys and values a call recomputes.

A call is one evaluation of a row whose tokens changed (:class:`~dllm_lit.denoisers.learned.LearnedDenoiser`'s row
cache serves an unchanged row as it is).  A *refresh* recomputes every position: the model's exact forward.  At a
call that is not a refresh, the positions below are recomputed through every layer (their keys and values at every
layer replace the cached ones); every other position enters attention with the keys and values of its last
computation, and keeps the logits of its last computation:

==========  =======================================================================================================
policy      recomputed at a call that is not a refresh
==========  =======================================================================================================
prefix      Fast-dLLM's prefix cache (Wu et al., *Fast-dLLM*, arXiv:2505.22618): the active block and the suffix,
            [lo, T); the prefix [0, lo) keeps the keys and values of the block's first call
dual        Fast-dLLM's dual cache: the active block [lo, hi) only; prefix and suffix are cached
delayed     dKV-Cache-Decode (Ma et al., *dKV-Cache*, arXiv:2505.15781): the masked positions and the positions
            decoded since the row's previous call, so a position's keys and values are cached one call after it is
            decoded
adaptive    dual, plus a layer-wise refresh in the manner of Elastic-Cache (arXiv:2510.14973) and d2Cache
            (arXiv:2509.23094): at layer l the attention of the block's queries (mean over heads, [n, T]) is
            compared with the same attention at the layer's last refresh; when 1 - cos > ``drift_threshold`` the
            layers l..L-1 are recomputed at every position, from the cached inputs of layer l
==========  =======================================================================================================

Refreshes: a row's first call after :meth:`KVCache.block_start` or :meth:`KVCache.reset` (the sampler's events), a
call at which one of its revealed tokens changed (a new decode, or an editing sampler), and, with
``refresh_interval`` = r, every r-th call since the last refresh (None: no periodic refresh; r = 1: every call, the
exact model).  Attention is softmax(q K^T / sqrt(dh)) V over all T keys (no mask: the model is bidirectional).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.denoisers.kv_stack import KVStack

__all__ = ["KVCache", "POLICIES", "BLOCK_POLICIES"]

#: the ``cache`` values of a learned denoiser ("none": its plain forward, no KVCache)
POLICIES = ("none", "prefix", "dual", "delayed", "adaptive")
#: the policies that need the sampler's active block
BLOCK_POLICIES = ("prefix", "dual", "adaptive")


class KVCache:
    """The cached keys, values and logits of one batch of rows under ``policy`` (module docstring)."""

    def __init__(self, stack: KVStack, policy: str, refresh_interval: int | None = None,
                 drift_threshold: float = 0.1) -> None:
        self.stack, self.policy = stack, policy
        self.refresh_interval, self.drift_threshold = refresh_interval, drift_threshold
        self.block: tuple[int, int] | None = None
        #: rows refreshed, rows computed partially, layer refreshes of the adaptive policy (tests, benchmarks)
        self.refreshes = self.partial_calls = self.layer_refreshes = 0
        self.reset()

    # ------------------------------------------------------------------ events
    def reset(self) -> None:
        """Forget every row (a new batch): each row's next call is a refresh."""
        self.ids: torch.Tensor | None = None

    def block_start(self, lo: int, hi: int) -> None:
        """Block [lo, hi) becomes active: every row's next call is a refresh."""
        self.block = (int(lo), int(hi))
        self.attn_ref = [None] * self.stack.num_layers
        if self.ids is not None:
            self.since.fill_(-1)

    # ------------------------------------------------------------------ evaluation
    def _ensure(self, B: int, T: int, device: torch.device) -> None:
        if self.ids is not None and self.ids.shape == (B, T) and self.ids.device == device:
            return
        L = self.stack.num_layers
        self.ids = torch.full((B, T), -1, dtype=torch.long, device=device)
        self.masked = torch.zeros((B, T), dtype=torch.bool, device=device)
        self.since = torch.full((B,), -1, dtype=torch.long, device=device)  # calls since the last refresh
        self.K, self.V, self.H = [None] * L, [None] * L, [None] * L
        self.attn_ref = [None] * L
        self.logits: torch.Tensor | None = None

    @torch.no_grad()
    def evaluate(self, ids: torch.Tensor, masked: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
        """Logits [R, T, V'] of rows ``rows`` [R] (of a batch of ``batch`` rows) whose model ids are ``ids`` [R, T]
        (``masked`` [R, T]: the masked positions), under the policy; the rows' cache is brought up to date."""
        R, T = ids.shape
        self._ensure(batch, T, ids.device)
        prev, prev_masked = self.ids[rows], self.masked[rows]
        changed = ids != prev
        since = self.since[rows]
        full = (since < 0) | (changed & ~prev_masked).any(1)
        if self.refresh_interval is not None:
            full |= since >= self.refresh_interval
        if self.policy in BLOCK_POLICIES and self.block is None:
            raise ValueError(f"cache={self.policy!r} was called before any block_start event: the sampler must "
                             "announce its blocks")
        sel = self._recomputed(masked, changed, T)
        if bool(full.any()):
            f = rows[full]
            idx = torch.arange(T, device=ids.device).expand(f.numel(), T)
            self._pass(f, idx, self.stack.embed(ids[full]), 0)
            self.refreshes += f.numel()
        part = ~full & sel.any(1)
        if bool(part.any()):
            self._partial(rows[part], ids[part], sel[part])
            self.partial_calls += int(part.sum())
        self.ids[rows], self.masked[rows] = ids, masked
        self.since[rows] = torch.where(full, 1, since + 1)
        return self.logits[rows]

    def _recomputed(self, masked: torch.Tensor, changed: torch.Tensor, T: int) -> torch.Tensor:
        """[R, T]: the positions a call that is not a refresh recomputes."""
        if self.policy == "delayed":
            return masked | changed
        pos = torch.arange(T, device=masked.device)
        lo, hi = self.block
        keep = (pos >= lo) if self.policy == "prefix" else (pos >= lo) & (pos < hi)
        return keep.expand_as(masked)

    def _partial(self, rows: torch.Tensor, ids: torch.Tensor, sel: torch.Tensor) -> None:
        """Recompute the selected positions of ``rows``: padded to the largest count with repeats of each row's first
        selected position (a repeat recomputes the same position from the same inputs)."""
        counts = sel.sum(1)
        n = int(counts.max())
        order = torch.sort((~sel).to(torch.int8), dim=1, stable=True).indices[:, :n]  # selected positions first
        j = torch.arange(n, device=ids.device)
        idx = torch.where(j < counts[:, None], order, order[:, :1])
        self._pass(rows, idx, self.stack.embed(ids.gather(1, idx)), 0)

    def _store(self, name: str, layer: int, rows: torch.Tensor, idx: torch.Tensor, value: torch.Tensor) -> None:
        """Write ``value`` [R, n, ...] at (rows, idx) of the layer's [B, T, ...] buffer ``name`` (allocated on first use)."""
        bufs = getattr(self, name)
        if bufs[layer] is None:
            B, T = self.ids.shape
            bufs[layer] = torch.zeros((B, T, *value.shape[2:]), dtype=value.dtype, device=value.device)
        bufs[layer][rows[:, None], idx] = value

    def _pass(self, rows: torch.Tensor, idx: torch.Tensor, h: torch.Tensor, start: int) -> None:
        """Layers ``start``.. for positions ``idx`` [R, n] of ``rows`` with layer-``start`` inputs h [R, n, d]; every
        other position's keys and values come from the cache.  Writes keys, values, inputs (adaptive) and logits."""
        st, T = self.stack, self.ids.shape[1]
        full = idx.shape[1] == T  # every position: the attention reference of the adaptive policy is recorded
        for layer in range(start, st.num_layers):
            if self.policy == "adaptive":
                self._store("H", layer, rows, idx, h)
            q, k, v = st.qkv(layer, h, idx)
            self._store("K", layer, rows, idx, k.transpose(1, 2))
            self._store("V", layer, rows, idx, v.transpose(1, 2))
            keys, values = self.K[layer][rows].transpose(1, 2), self.V[layer][rows].transpose(1, 2)
            att = torch.softmax(torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)
            if self.policy == "adaptive":
                drift = self._drift(layer, rows, att, full)
                if drift is not None and bool(drift.any()):  # these rows: layers layer.. at every position
                    d = rows[drift]
                    self.layer_refreshes += d.numel()
                    self._pass(d, torch.arange(T, device=idx.device).expand(d.numel(), T), self.H[layer][d], layer)
                    keep = ~drift
                    rows, idx, h, q, att, values = rows[keep], idx[keep], h[keep], q[keep], att[keep], values[keep]
                    if rows.numel() == 0:
                        return
            h = st.out(layer, h, torch.matmul(att, values))
        logits = st.head(h)
        if self.logits is None:
            B = self.ids.shape[0]
            self.logits = torch.zeros((B, T, logits.shape[-1]), dtype=logits.dtype, device=logits.device)
        self.logits[rows[:, None], idx] = logits

    def _drift(self, layer: int, rows: torch.Tensor, att: torch.Tensor, full: bool) -> torch.Tensor | None:
        """Adaptive policy: on a full computation record the block queries' attention (mean over heads); otherwise
        return the rows whose attention drifted, 1 - cos(now, at the last refresh) > drift_threshold."""
        lo, hi = self.block
        if full:
            a = att[:, :, lo:hi].mean(1)
            ref = self.attn_ref[layer]
            if ref is None or ref.shape[1:] != a.shape[1:]:
                ref = self.attn_ref[layer] = torch.zeros((self.ids.shape[0], *a.shape[1:]), dtype=a.dtype,
                                                         device=a.device)
            ref[rows] = a
            return None
        a = att.mean(1).flatten(1)
        ref = self.attn_ref[layer][rows].flatten(1)
        cos = (a * ref).sum(1) / (a.norm(dim=1) * ref.norm(dim=1)).clamp(min=torch.finfo(a.dtype).tiny)
        return (1.0 - cos) > self.drift_threshold
