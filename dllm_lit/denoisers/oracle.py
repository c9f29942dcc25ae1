"""The exact oracle denoiser: HMM posterior of the Markov prior under masking evidence.

Paper Sec. 3.2 and App. A compute gamma_t(v) = p(x_t = v | z) by forward-backward over all
B x T positions at every sampler step.  Under hard evidence the chain factorises at revealed
tokens, so for a masked position i with nearest revealed neighbours x_a (a < i) and x_b (b > i)

    gamma_i(v)  proportional to  P'^(i-a)(x_a, v) * P'^(b-i)(v, x_b),

with pi(v) in place of the left factor when no token is revealed to the left, and 1 in place
of the right factor when none is revealed to the right.  :class:`OracleDenoiser` caches the
matrix powers P'^d for d = 1..D and answers each query with two O(V) gathers.

Certified depth.  Since every row of P'^(d+1) is a convex combination of rows of P'^d,
r_d = max_{v,w} |P'^d(v, w) / pi(w) - 1| is non-increasing in d.  D is the first depth with
r_D <= mixing_tol; then for d >= D, P'^d = (1 + O(mixing_tol)) 1 pi^T entrywise and the cached
P'^D is used, which changes each posterior probability by at most ~2 mixing_tol (default 1e-8).
If the chain does not mix that well within the memory budget ``max_cache_bytes``, the cache stops
at the budget and longer distances are computed exactly by repeated multiplication with cached
powers (a slower, exact fallback).  A chain whose powers never converge - transient states
(pi(w) = 0), a periodic or a reducible kernel, found by :func:`~dllm_lit.markov.structure.chain_structure`
when the oracle is built - gets the same exact fallback with a table of at most 64 powers, and one
warning that names what is wrong with the chain; so does a chain that mixes too slowly for any affordable
depth to be certified, found before the build from its second eigenvalue modulus (:mod:`dllm_lit.markov.mixing`).

Zero-probability evidence: if P'^(i-a)(x_a, .) * P'^(b-i)(., x_b) vanishes, the right neighbour
is unreachable and gamma_i is the left-only law P'^(i-a)(x_a, .) (pi with no left neighbour) -
the same rule as :func:`dllm_lit.denoisers.forward_backward.forward_backward_posterior`.

Cost per query O(V); finding nearest neighbours costs O(B T) per call with no host
synchronisation (cummax / cummin scans), on CPU or CUDA.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

from dllm_lit.denoisers.hmm_first_order import numba_available
from dllm_lit.denoisers.local import LocalDenoiser
from dllm_lit.denoisers.oracle_cache import load_or_build
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.util.reductions import fixed_order_sum

__all__ = ["OracleDenoiser"]


class OracleDenoiser(LocalDenoiser):
    """Frozen exact posterior p*(x_i | z) for a :class:`MarkovChain` (see module docstring).

    Args:
        chain: the ground-truth chain.
        mixing_tol: relative tolerance r_D at which powers are treated as converged to 1 pi^T.
        max_cache_bytes: memory budget for the cached powers (rows and columns).
        dtype: dtype of cached powers and outputs (float32 default; float64 for exactness studies).
        cache_dir: where the power table is cached on disk (shared by the processes of a node;
            see :mod:`dllm_lit.denoisers.oracle_cache`); None builds it in memory.
    """

    def __init__(
        self,
        chain: MarkovChain,
        mixing_tol: float = 1e-8,
        max_cache_bytes: int = 4 * 2**30,
        dtype: torch.dtype = torch.float32,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(chain, MarkovChain):
            raise TypeError(f"chain must be a MarkovChain, got {type(chain).__name__}")
        if not 0 < mixing_tol < 1:
            raise ValueError(f"mixing_tol must lie in (0, 1), got {mixing_tol}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.chain = chain
        self.vocab_size = chain.vocab_size
        self.mixing_tol = float(mixing_tol)
        built = load_or_build(chain, self.mixing_tol, int(max_cache_bytes), dtype, cache_dir)
        if built.problem:
            warnings.warn(f"{built.problem}: the oracle keeps {built.depth} powers and multiplies longer distances "
                          "out exactly (slower)", stacklevel=2)
        #: P' > 0 entrywise (e.g. a teleport with full-support nu): no evidence has probability zero
        self.strictly_positive = built.strictly_positive
        self.depth = built.depth
        self.certified = built.certified
        self.mixing_residual = built.residual
        # table[2 (d-1) V + x] = P'^d(x, .), table[(2d-1) V + w] = P'^d(., w), then pi and ones
        self.register_buffer("table", built.table, persistent=False)
        #: per-row maxima, column minima at depth D and a lower bound of pi, built by max_prob_bound on first use
        self.register_buffer("_row_max", None, persistent=False)
        self.requires_grad_(False)
        self.eval()

    # ------------------------------------------------------------------ core query
    def probs_given_neighbours(self, x_left: torch.Tensor, d_left: torch.Tensor, x_right: torch.Tensor, d_right: torch.Tensor) -> torch.Tensor:
        """gamma(v) proportional to P'^(d_left)(x_left, v) P'^(d_right)(v, x_right), rows summing to one: [n, V].

        ``d_left <= 0`` means no revealed token on the left (factor pi), ``d_right <= 0`` none on
        the right (factor 1).  If the product vanishes (unreachable right neighbour) the left
        factor alone is returned, normalised.  Cost O(n V).
        """
        has_left, has_right = d_left > 0, d_right > 0
        d_left, d_right = d_left.long(), d_right.long()
        r_idx, c_idx = self.table_rows(x_left, d_left, x_right, d_right)
        lf, rf = self._rows(r_idx), self._rows(c_idx)
        if not self.certified:
            lf, rf = self._beyond_cache(lf, rf, has_left, has_right, d_left, d_right)
        # normalisers by a fixed-order sum: a row's float32 value is the same on every device and in any batch
        if self.strictly_positive:  # every P'^d > 0: the product never vanishes, normalise in place
            g = lf.mul_(rf)
            g = g.div_(self._canonical_sums(g, x_left, d_left, x_right, d_right))
        else:
            g = lf * rf
            s = self._canonical_sums(g, x_left, d_left, x_right, d_right)
            bad = s <= 0  # unreachable right neighbour: left-only law
            g = torch.where(bad, lf, g)
            g = g.div_(torch.where(bad, fixed_order_sum(lf, keepdim=True), s))
        right_only = has_right & ~has_left
        if bool(right_only.any()):
            g[right_only] = self._right_only_rows(rf[right_only], x_right[right_only], d_right[right_only], g[right_only])
        # a row normalised by its mirror's sum (or S) may exceed 1 by an ulp where it is a point mass; a row divided
        # by its own sum never does, so the clamp changes nothing else
        return g.clamp_(max=1.0)

    def _canonical_sums(self, g: torch.Tensor, x_left: torch.Tensor, d_left: torch.Tensor, x_right: torch.Tensor,
                        d_right: torch.Tensor) -> torch.Tensor:
        """Row normalisers [n, 1]: the fixed-order sum of ``g``, except that a two-sided row with d_left > d_right
        takes the sum of its mirror (a, d_right, b, d_left), sum_v P'^(d_right)(a, v) P'^(d_left)(v, b) (and, where
        a = b, the mirror's numerator at v = a, written into ``g``).

        Both are P'^(d_left + d_right)(a, b) (Chapman-Kolmogorov), but summed over different products they round
        differently.  The mirror positions of one gap between revealed tokens a ... b then share one normaliser, and
        their numerators P'^(d1)(a, v) P'^(d2)(v, b) and P'^(d2)(a, v) P'^(d1)(v, b) are the same product at v = a = b:
        the mathematically equal confidences are equal numbers (``docs/exactness.md``).
        """
        s = fixed_order_sum(g, keepdim=True)
        swap = ((d_left > d_right) & (d_right > 0)).reshape(-1)  # any leading shape: flat rows below
        if bool(swap.any()):
            i = swap.nonzero().squeeze(1)
            xl, dl, xr, dr = (t.reshape(-1)[i] for t in (x_left, d_left, x_right, d_right))
            r_idx, c_idx = self.table_rows(xl, dr, xr, dl)
            lf, rf = self._rows(r_idx), self._rows(c_idx)
            if not self.certified:
                ones = torch.ones_like(dl, dtype=torch.bool)
                lf, rf = self._beyond_cache(lf, rf, ones, ones, dr, dl)
            mirror = lf.mul_(rf)
            s.view(-1, 1)[i] = fixed_order_sum(mirror, keepdim=True)
            # a = b: the entry at v = a takes the mirror's numerator.  Equal to the own one when both factors are
            # table entries (a product commutes); beyond an uncertified table's depth the two sides are multiplied
            # out in different orders, and this keeps the mirror tie exact there too
            same = (xl == xr).nonzero().squeeze(1)
            g.view(-1, g.shape[-1])[i[same], xl[same].long()] = mirror[same, xl[same].long()]
        return s

    def _right_only_rows(self, rf: torch.Tensor, x_right: torch.Tensor, d_right: torch.Tensor,
                         fallback: torch.Tensor) -> torch.Tensor:
        """Rows with only a right neighbour b at distance d, written so that exact ties are exact in floats.

        gamma(v) = P'^d(v, b) pi(v) / pi(b) (time reversal of the stationary chain), divided by the normaliser
        S = sum_v P'^d(b, v) of the *left-only* row of b at distance d (S = 1 up to rounding).  At v = b this is
        P'^d(b, b) * 1 / S: the same float operations, on the same table entry, as the left-only row of b at
        distance d, so the mathematically equal confidences p(x_{i-d} = b | x_i = b) = p(x_{i+d} = b | x_i = b)
        are equal numbers in every dtype and on every device, and a sampler's tie rule decides between them, not
        the rounding of two different normalisers (``docs/exactness.md``).  Rows whose right neighbour has pi(b) = 0
        keep ``fallback`` (the general formula).
        """
        V, D = self.vocab_size, self.depth
        pi = self.table[2 * D * V]
        pi_b = pi[x_right.long()]
        left_rows = (2 * d_right.clamp(min=1, max=D) - 2) * V + x_right.long()
        lb = self._rows(left_rows)
        if not self.certified:
            lb, _ = self._beyond_cache(lb, lb, torch.ones_like(d_right, dtype=torch.bool),
                                       torch.zeros_like(d_right, dtype=torch.bool), d_right, d_right)
        g = rf * (pi / pi_b.clamp(min=torch.finfo(pi.dtype).tiny)[:, None])
        g = g.div_(fixed_order_sum(lb, keepdim=True))
        return torch.where((pi_b > 0)[:, None], g, fallback)

    def _rows(self, idx: torch.Tensor) -> torch.Tensor:
        """``self.table[idx]`` (rows of the power table, [*idx.shape, V]) by ``index_select``: the same numbers,
        about 4x faster on the CPU for V = 4096 than advanced indexing (a row copy instead of per-element indexing)."""
        return self.table.index_select(0, idx.reshape(-1)).view(*idx.shape, self.table.shape[1])

    def table_rows(self, x_left, d_left, x_right, d_right) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the power table holding the left factor P'^d(x_left, .) and the right factor P'^d(., x_right)."""
        V, D = self.vocab_size, self.depth
        x_left, x_right = x_left.long(), x_right.long()
        r_idx = torch.where(d_left > 0, (2 * d_left.long().clamp(min=1, max=D) - 2) * V + x_left.clamp(0, V - 1), 2 * D * V)
        c_idx = torch.where(d_right > 0, (2 * d_right.long().clamp(min=1, max=D) - 1) * V + x_right.clamp(0, V - 1),
                            2 * D * V + 1)
        return r_idx, c_idx

    def neighbour_keys(self, x_left, d_left, x_right, d_right) -> torch.Tensor | None:
        """(left table row, right table row) as one int64: with a certified table the posterior is a
        function of these two rows only (distances beyond D share the row of P'^D)."""
        if not self.certified:
            return None
        r_idx, c_idx = self.table_rows(x_left, d_left, x_right, d_right)
        return r_idx * self.table.shape[0] + c_idx

    def grid_keys(self, z: torch.Tensor) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
        """:meth:`LocalDenoiser.grid_keys`; on the CPU with numba in two compiled scans per sequence (the same
        integers, no query formed: ``dllm_lit/denoisers/oracle_keys_kernel.py``)."""
        if not self.certified or z.device.type != "cpu" or not numba_available() or z.numel() == 0:
            return super().grid_keys(z)
        from dllm_lit.denoisers.oracle_keys_kernel import grid_keys
        out = torch.empty(z.shape, dtype=torch.int64)
        grid_keys(z.contiguous().numpy(), self.mask_id, self.vocab_size, self.depth, self.table.shape[0],
                  out.numpy())
        return out.view(-1), None

    def neighbour_key_count(self) -> int | None:
        """Keys are (left row, right row) of the power table: table rows squared (None without certified keys)."""
        return self.table.shape[0] ** 2 if self.certified else None

    def neighbour_key_depth(self) -> int | None:
        """The table's depth D: a distance d >= D reads the row of P'^D (None without certified keys)."""
        return self.depth if self.certified else None

    #: relative slack of :meth:`max_prob_bound` over the exact bound, covering float32 rounding of the table,
    #: the products and the row sum (at most ~V 2^-24 relative for V up to a few thousand)
    BOUND_SLACK = 1e-3

    @property
    def has_max_prob_bound(self) -> bool:
        return self.certified

    def max_prob_bound(self, x_left, d_left, x_right, d_right) -> torch.Tensor | None:
        """Upper bounds on max_v gamma(v) without computing gamma: with L = P'^a(x_left, .), R = P'^b(., x_right)
        (distances capped at D, as :meth:`probs_given_neighbours`),

            max_v L(v) R(v) / Z  <=  max L * max R / Z,   Z = sum_v L(v) R(v) = P'^(a+b)(x_left, x_right)

        (Chapman-Kolmogorov).  Z is read from the table when a + b <= D and bounded below by
        min_u P'^D(u, x_right) otherwise (a convex combination of rows of P'^D); with no left neighbour
        Z = pi(x_right) (stationarity, up to the chain's ``stationary_tol``), with no right neighbour Z = 1.
        The bound is inflated by :attr:`BOUND_SLACK` for rounding and capped at 1, and is 1 where the lower
        bound of Z vanishes (then the computed row may be the left-only law).  Where Z > 0 but the float32 row
        sum underflows to 0, the left-only law's maximum max L <= max L * max R / Z (as Z <= max R) is covered
        too.  None for an uncertified table (distances beyond its depth are not read from capped rows)."""
        if not self.certified:
            return None
        V, D = self.vocab_size, self.depth
        if self._row_max is None:  # once, on first use (one pass over the table); buffers follow .to(device)
            tol = float(self.chain.stationary_tol)
            self.register_buffer("_row_max", self.table.amax(1).to(torch.float64), persistent=False)
            self.register_buffer("_col_min_depth", self.table[(2 * D - 1) * V:2 * D * V].amin(1).to(torch.float64),
                                 persistent=False)
            self.register_buffer("_pi_low", (self.chain.stationary.to(torch.float64) - tol).clamp(min=0.0)
                                 .to(self.table.device), persistent=False)
        has_left, has_right = d_left > 0, d_right > 0
        a, b = d_left.long().clamp(1, D), d_right.long().clamp(1, D)
        xl, xr = x_left.long().clamp(0, V - 1), x_right.long().clamp(0, V - 1)
        r_idx, c_idx = self.table_rows(x_left, d_left, x_right, d_right)
        s = a + b
        inside = s <= D
        z_both = torch.where(inside, self.table[(2 * (s.clamp(max=D) - 1)) * V + xl, xr].to(torch.float64),
                             self._col_min_depth[xr])
        z = torch.where(has_left & has_right, z_both,
                        torch.where(has_right, self._pi_low[xr], torch.ones_like(z_both)))
        bound = self._row_max[r_idx] * self._row_max[c_idx] * (1.0 + self.BOUND_SLACK) / z
        return torch.where(z > 0, bound, torch.ones_like(bound)).clamp(max=1.0)

    def _beyond_cache(self, left_f, right_f, has_left, has_right, d1, d2):
        """Uncertified cache: distances beyond D by repeated multiplication with cached powers (exact, slower)."""
        D, V = self.depth, self.vocab_size
        left_f, right_f = left_f.clone(), right_f.clone()
        for vec, dist, has, is_left in ((left_f, d1, has_left, True), (right_f, d2, has_right, False)):
            rem = torch.where(has, dist - D, 0).clamp(min=0)
            while bool((rem > 0).any()):
                step = rem.clamp(max=D)
                for s in torch.unique(step[step > 0]).tolist():
                    sel = (step == s).nonzero().squeeze(1)
                    mat = self.table[2 * (s - 1) * V:(2 * s - 1) * V]  # P'^s
                    vec[sel] = vec[sel] @ (mat if is_left else mat.T)
                rem = rem - step
        return left_f, right_f

    @property
    def output_dtype(self) -> torch.dtype:
        return self.table.dtype

    def supports(self, channel, leave_one_out: bool = False) -> bool:
        """Every evidence channel: absorbing masks by the power table (leave-one-out too:
        :meth:`LocalDenoiser.posterior`), the others by the exact HMM posterior of the chain (S = V, B = I;
        :func:`dllm_lit.denoisers.hmm_posterior.hmm_posterior`, float64)."""
        return True

    def log_posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        from dllm_lit.denoisers.channels import AbsorbingMask

        if channel is None or isinstance(channel, AbsorbingMask):  # the power table, leave-one-out too
            return super().log_posterior(z, channel, leave_one_out)
        return self._channel_posterior(z, channel, leave_one_out).log_().to(self.output_dtype)  # a fresh tensor

    def posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        """:meth:`LocalDenoiser.posterior` under absorbing masks; under any other channel the exact float64
        forward-backward probabilities themselves (not exp of the rounded log: the uniform-state samplers'
        numbers, ``docs/performance.md``)."""
        from dllm_lit.denoisers.channels import AbsorbingMask

        if channel is None or isinstance(channel, AbsorbingMask):
            return super().posterior(z, channel, leave_one_out)
        return self._channel_posterior(z, channel, leave_one_out)

    def transient_posterior(self, z: torch.Tensor, channel) -> torch.Tensor:
        """:meth:`posterior` leave-one-out; under a channel other than absorbing masks, on the CPU, written into
        one float64 buffer kept for the next call (the same numbers: the kernel's per-row operations do not
        depend on where they land; a fresh [B, T, V] buffer costs more in page faults than the forward-backward
        itself, ``docs/performance.md``)."""
        from dllm_lit.denoisers.channels import AbsorbingMask

        overridden = type(self).posterior is not OracleDenoiser.posterior  # a subclass's posterior is the answer
        if overridden or channel is None or isinstance(channel, AbsorbingMask) or z.device.type != "cpu":
            return self.posterior(z, channel, leave_one_out=True)
        n = z.numel() * self.vocab_size
        buf = getattr(self, "_scratch", None)
        if buf is None or buf.numel() < n:
            buf = self._scratch = torch.empty(n, dtype=torch.float64)
        return self._channel_posterior(z, channel, True, buf[:n].view(*z.shape, self.vocab_size))

    def _channel_posterior(self, z: torch.Tensor, channel, leave_one_out: bool,
                           out: torch.Tensor | None = None) -> torch.Tensor:
        """p(x_i | z) (or | z_{-i}) under ``channel`` by the chain's HMM forward-backward: float64 [B, T, V]
        (in ``out`` where the first-order kernel answers, :func:`~dllm_lit.denoisers.hmm_posterior.hmm_posterior`)."""
        from dllm_lit.denoisers.hmm_posterior import hmm_posterior
        from dllm_lit.markov.hmm import HMMWorld

        if getattr(self, "_world", None) is None:
            self._world = HMMWorld.from_chain(self.chain)
        return hmm_posterior(self._world, z, channel, leave_one_out, out=out)

    def describe(self) -> dict:
        return {"denoiser": "oracle", "depth": self.depth, "certified": self.certified, "mixing_tol": self.mixing_tol}

    def extra_repr(self) -> str:
        return f"V={self.vocab_size}, depth={self.depth}, certified={self.certified}, residual={self.mixing_residual:.2e}"
