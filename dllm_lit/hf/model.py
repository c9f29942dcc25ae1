"""The exact oracle as a Hugging Face masked LM: ``model(input_ids, attention_mask=..., position_ids=...).logits``.

``logits[b, i, :]`` is the log of the exact posterior p(x_i = v | the revealed tokens query i may attend to)
for the chain's ids v < V and -inf on the mask id and every other special id (docs/oracle_model.md).  Under
hard masking evidence a first-order chain factorises at revealed tokens, so each row needs only the nearest
revealed neighbours on each side and their chain distances (:mod:`dllm_lit.hf.evidence`); the rows come from
the oracle's power table (:class:`~dllm_lit.denoisers.OracleDenoiser`), one per distinct neighbourhood.

* a revealed position: ``revealed="self"`` gives a point mass on its token (SUBS; the paper's convention) when
  the position may attend to itself; ``"leave_one_out"`` gives p(x_i | every other revealed token), what an
  editing model approximates;
* padding (2-D mask 0) is not part of the sequence: its rows are a point mass on the pad id;
* ``logit_shift = 1``: row i is the posterior of the token after i (Dream-style models), given what query i
  may attend to; the last row predicts the position after the sequence;
* ties: :mod:`dllm_lit.hf.ties` (``exact_ties``, ``tie_jitter``);
* an HMM world (order-k, switching, hidden-state; :meth:`OracleForMaskedLM.from_world`): a revealed token does not
  cut the dependence, so each row is an exact forward-backward over every key its query may attend to
  (:mod:`dllm_lit.hf.world_rows`); the world travels in the buffers (emission, transition or context rows, initial).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser
from dllm_lit.denoisers.oracle import OracleDenoiser
from dllm_lit.hf.config import OracleConfig
from dllm_lit.hf.evidence import NO_LEFT, neighbours, read_evidence
from dllm_lit.hf.ties import exact_logits, jitter_logits
from dllm_lit.hf.world_rows import world_query_rows
from dllm_lit.util.indices import flat_nonzero
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["OracleForMaskedLM"]


class OracleForMaskedLM(PreTrainedModel):
    """Exact posterior logits of a Markov chain behind the Hugging Face masked-LM call (module docstring).

    Build one with :meth:`from_chain`; ``save_pretrained`` writes the chain with it and
    ``AutoModelForMaskedLM.from_pretrained(dir)`` reads it back (``import dllm_lit.hf`` registers the class).
    """

    config_class = OracleConfig
    base_model_prefix = "oracle"
    main_input_name = "input_ids"
    _no_split_modules: list[str] = []
    _keys_to_ignore_on_load_unexpected: list[str] = []

    def __init__(self, config: OracleConfig, chain: MarkovChain | HMMWorld | None = None) -> None:
        super().__init__(config)
        V, K = config.chain_vocab_size, config.chain_top_k
        if config.world_kind == "hmm":
            self._world_buffers(config, chain)
        else:
            self.register_buffer("nbr_idx", torch.zeros(V, K, dtype=torch.long))
            self.register_buffer("nbr_prob", torch.zeros(V, K, dtype=torch.float64))
            self.register_buffer("nu", torch.zeros(V, dtype=torch.float64))
            self.register_buffer("stationary", torch.zeros(V, dtype=torch.float64))
            self.register_buffer("eps", torch.zeros((), dtype=torch.float64))
        if chain is not None and config.world_kind == "chain":
            if (chain.vocab_size, chain.top_k) != (V, K):
                raise ValueError(f"the chain has V = {chain.vocab_size}, K = {chain.top_k}; the config {V}, {K}")
            with torch.no_grad():
                for name, value in (("nbr_idx", chain.nbr_idx), ("nbr_prob", chain.nbr_prob), ("nu", chain.nu),
                                    ("stationary", chain.stationary), ("eps", torch.tensor(chain.eps))):
                    getattr(self, name).copy_(value)
        #: the chain and its oracles, built on first use (outside the module tree: nothing of them is saved)
        self.__dict__["_built"] = {"chain": chain}
        #: power tables are cached on disk here when set (like the CLI's cache); None builds them in memory
        self.cache_dir: str | Path | None = None
        #: forward calls since construction (ExternalSampler reads it to count NFE)
        self.calls = 0
        self._jitter = torch.Generator().manual_seed(config.tie_jitter_seed)
        self.post_init()
        self.requires_grad_(False)
        self.eval()

    def _world_buffers(self, config: OracleConfig, world: HMMWorld | None) -> None:
        """Buffers of an HMM world: emission [S, V], transition [S, S] or context rows [S, V], initial [S]."""
        V, S, k = config.chain_vocab_size, config.world_states, config.world_order
        self.register_buffer("emission", torch.zeros(S, V, dtype=torch.float64))
        self.register_buffer("transition", torch.zeros(S, V if k else S, dtype=torch.float64))
        self.register_buffer("initial", torch.zeros(S, dtype=torch.float64))
        if world is not None:
            if not isinstance(world, HMMWorld) or (world.vocab_size, world.num_states, world.order or 0) != (V, S, k):
                raise ValueError(f"the world does not match the config (V = {V}, S = {S}, order = {k})")
            with torch.no_grad():
                self.emission.copy_(world.B)
                self.transition.copy_(world.rows if k else world.A)
                self.initial.copy_(world.initial)

    @classmethod
    def from_world(cls, world: MarkovChain | HMMWorld, cache_dir: str | Path | None = None,
                   **options: Any) -> "OracleForMaskedLM":
        """The oracle model of a first-order chain (:meth:`from_chain`) or of an HMM world (order-k, switching,
        hidden-state): exact forward-backward rows (:mod:`dllm_lit.hf.world_rows`)."""
        if isinstance(world, MarkovChain):
            return cls.from_chain(world, cache_dir=cache_dir, **options)
        if not isinstance(world, HMMWorld):
            raise TypeError(f"world must be a MarkovChain or an HMMWorld, got {type(world).__name__}")
        config = OracleConfig(chain_vocab_size=world.vocab_size, chain_top_k=1, chain_fingerprint=world.fingerprint,
                              world_kind="hmm", world_states=world.num_states, world_order=world.order or 0,
                              **options)
        return cls(config, world)

    @classmethod
    def from_chain(cls, chain: MarkovChain, cache_dir: str | Path | None = None, **options: Any) -> "OracleForMaskedLM":
        """The oracle model of ``chain``; ``options`` are :class:`OracleConfig` options (``revealed``, ...)."""
        if isinstance(chain, HMMWorld):
            return cls.from_world(chain, cache_dir=cache_dir, **options)
        if not isinstance(chain, MarkovChain):
            raise TypeError(f"chain must be a MarkovChain, got {type(chain).__name__}")
        config = OracleConfig(chain_vocab_size=chain.vocab_size, chain_top_k=chain.top_k,
                              chain_fingerprint=chain.fingerprint, **options)
        model = cls(config, chain)
        model.cache_dir = cache_dir
        return model

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Nothing to initialise: the buffers hold the chain (set by the constructor or loaded)."""

    @property
    def dtype(self) -> torch.dtype:
        """The logits' dtype (the model has no parameters to read it from)."""
        return torch.float64 if self.config.logits_dtype == "float64" else torch.float32

    @property
    def device(self) -> torch.device:
        return self.initial.device if self.config.world_kind == "hmm" else self.nbr_prob.device

    def set_jitter_seed(self, seed: int) -> None:
        """Restart the tie-jitter noise from ``seed`` (ExternalSampler calls it per work item)."""
        self._jitter.manual_seed(int(seed))

    # ------------------------------------------------------------------ the chain and its oracles
    @property
    def chain(self) -> MarkovChain | HMMWorld:
        """The chain (or HMM world), rebuilt from the buffers once after loading; its fingerprint must match the
        config's."""
        built = self.__dict__["_built"]
        if built.get("chain") is None and self.config.world_kind == "hmm":
            k = self.config.world_order
            world = (HMMWorld(context_rows=self.transition.cpu(), initial=self.initial.cpu()) if k else
                     HMMWorld(emission=self.emission.cpu(), transition=self.transition.cpu(), initial=self.initial.cpu()))
            # keep the stored (already canonical) tensors: the constructor's renormalisation may move a last bit
            world.B, world.initial = self.emission.cpu().clone(), self.initial.cpu().clone()
            if k:
                world.rows = self.transition.cpu().clone()
            else:
                world.A = self.transition.cpu().clone()
            world._fingerprint = None
            want = self.config.chain_fingerprint
            if want is not None and world.fingerprint != want:
                raise ValueError(f"the loaded world's fingerprint {world.fingerprint[:12]} differs from the config's "
                                 f"chain_fingerprint {want[:12]}: the weights do not belong to this config")
            built["chain"] = world
        if built.get("chain") is None:
            chain = MarkovChain(self.nbr_idx.cpu(), self.nbr_prob.cpu(), eps=float(self.eps), nu=self.nu.cpu(),
                                stationary=self.stationary.cpu())
            # the stored tensors are already the chain's canonical ones; the constructor's renormalisation of
            # its rows may move their last bit, so the chain keeps the stored values (which it has checked)
            chain.nbr_prob, chain.nu = self.nbr_prob.cpu().clone(), self.nu.cpu().clone()
            want = self.config.chain_fingerprint
            if want is not None and chain.fingerprint != want:
                raise ValueError(f"the loaded chain's fingerprint {chain.fingerprint[:12]} differs from the config's "
                                 f"chain_fingerprint {want[:12]}: the weights do not belong to this config")
            built["chain"] = chain
        return built["chain"]

    def oracle(self, dtype: torch.dtype, device: torch.device) -> OracleDenoiser | HMMOracleDenoiser:
        """The exact oracle with its power table in ``dtype`` on ``device`` (built once per pair); in an HMM world
        the HMM oracle returning ``dtype`` rows."""
        built = self.__dict__["_built"]
        key = (dtype, str(device))
        if key not in built and self.config.world_kind == "hmm":
            built[key] = HMMOracleDenoiser(self.chain, dtype=dtype).to(device)
        if key not in built:
            den = OracleDenoiser(self.chain, mixing_tol=self.config.mixing_tol, dtype=dtype, cache_dir=self.cache_dir)
            built[key] = den.to(device)
        return built[key]

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | str | None = None,
                position_ids: torch.Tensor | None = None, return_dict: bool | None = None,
                **kwargs: Any) -> MaskedLMOutput | tuple[torch.Tensor]:
        """Exact log-posterior logits [B, L, vocab_size] (module docstring).  Other keyword arguments of a
        transformer call (``use_cache``, ``output_attentions``, ...) have no meaning here and are ignored."""
        if (not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point()
                or input_ids.is_complex() or input_ids.dtype == torch.bool):
            what = f"{tuple(input_ids.shape)} {input_ids.dtype}" if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be an integer tensor [B, L] (bool is not an id type), got {what}")
        input_ids = input_ids.long()  # int8 / uint8 / int16 / int32 ids index like int64 ones
        self.calls += 1
        logits = self._logits(input_ids, attention_mask, position_ids)
        if return_dict is False:
            return (logits,)
        return MaskedLMOutput(logits=logits)

    def _logits(self, ids: torch.Tensor, attention_mask: torch.Tensor | str | None,
                position_ids: torch.Tensor | None) -> torch.Tensor:
        cfg = self.config
        V, M, W = cfg.chain_vocab_size, cfg.mask_token_id, cfg.vocab_size
        B, L = ids.shape
        ev = read_evidence(ids, attention_mask, position_ids)
        chain_tok = (ids >= 0) & (ids < V)
        bad = ev.token & ~chain_tok & (ids != M)
        if bool(bad.any()):
            b, i = (int(t) for t in bad.nonzero()[0])
            raise ValueError(f"input_ids[{b}, {i}] = {int(ids[b, i])} is neither a chain token (0..{V - 1}) nor the "
                             f"mask id {M}; other ids may appear only at padding (attention_mask 0)")
        token, allowed, pos = ev.token, ev.allowed, ev.pos
        if cfg.logit_shift:  # targets are the next positions: one more position after the sequence
            last = torch.where(token, pos, -1).amax(1, keepdim=True) + 1
            ids = torch.cat([ids, torch.full((B, 1), M, dtype=ids.dtype, device=ids.device)], 1)
            chain_tok = torch.cat([chain_tok, torch.zeros(B, 1, dtype=torch.bool, device=ids.device)], 1)
            token = torch.cat([token, torch.ones(B, 1, dtype=torch.bool, device=ids.device)], 1)
            pos = torch.cat([pos, last], 1)
            if allowed is not None:  # target t sees what query t - 1 sees (the appended key is a mask)
                rows = torch.cat([allowed[:, :1], allowed], 1)
                allowed = torch.cat([rows, torch.zeros(B, L + 1, 1, dtype=torch.bool, device=ids.device)], 2)
        Lt = ids.shape[1]
        revealed = token & chain_tok
        left, right = neighbours(revealed, allowed) if cfg.world_kind == "chain" else (None, None)
        sees_self = token if allowed is None else token & allowed.diagonal(dim1=1, dim2=2)
        point = revealed & sees_self & (cfg.revealed == "self")
        post = token & ~point
        dtype = torch.float64 if cfg.logits_dtype == "float64" else torch.float32
        # one gather from a small table of rows: V point masses, the pad row, then one row per distinct
        # neighbourhood of the posterior queries
        special = torch.full((V + 1, W), float("-inf"), dtype=dtype, device=ids.device)
        diag = torch.arange(V, device=ids.device)
        special[diag, diag] = 0.0
        special[V, cfg.pad_token_id] = 0.0
        flat_ids = ids.reshape(-1)
        row_id = torch.where(point.reshape(-1), flat_ids, V)
        q = flat_nonzero(post.reshape(-1))
        table = special
        if q.numel() and cfg.world_kind == "hmm":
            probs, inv = world_query_rows(self.chain, ids, token, revealed, allowed, pos, q)
            table = torch.cat([special, self._world_logits(probs, W, dtype)])
            row_id[q] = inv + (V + 1)
        elif q.numel():
            rows, inv = self._posterior_logits(ids, pos, left, right, q, W, dtype)
            table = torch.cat([special, rows])
            row_id[q] = inv + (V + 1)
        out = table.index_select(0, row_id)
        if cfg.tie_jitter > 0:
            out = jitter_logits(out, cfg.tie_jitter, self._jitter)
        out = out.view(B, Lt, W)
        return out[:, 1:] if cfg.logit_shift else out

    def _world_logits(self, probs: torch.Tensor, W: int, dtype: torch.dtype) -> torch.Tensor:
        """Logit rows [u, W] of float64 probability rows [u, V] (rounded as the chain's rows are)."""
        V = self.config.chain_vocab_size
        full = torch.zeros(probs.shape[0], W, dtype=torch.float64, device=probs.device)
        full[:, :V] = probs
        if dtype == torch.float32 and self.config.exact_ties:
            return exact_logits(full)
        return torch.where(full > 0, full.log(), float("-inf")).to(dtype)

    def _posterior_logits(self, ids, pos, left, right, q, W, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, inv): log-posterior rows [u, W], one per distinct neighbourhood of the flat query indices
        ``q``, and the row of each query (all n rows and ``arange(n)`` when the oracle names no keys)."""
        cfg = self.config
        V = cfg.chain_vocab_size
        Lt = ids.shape[1]
        b, i = q // Lt, q % Lt
        a, c = left[b, i], right[b, i]
        has_a, has_c = a != NO_LEFT, c < Lt
        a0, c0 = a.clamp(min=0), c.clamp(max=Lt - 1)
        x_left, x_right = ids[b, a0], ids[b, c0]
        d_left = torch.where(has_a, pos[b, i] - pos[b, a0], 0)
        d_right = torch.where(has_c, pos[b, c0] - pos[b, i], 0)
        query = (x_left, d_left, x_right, d_right)
        exact = cfg.exact_ties and dtype == torch.float32
        den = self.oracle(torch.float64 if exact else dtype, ids.device)
        got = den.distinct_rows(query)
        rows, inv = got if got is not None else (den.probs_given_neighbours(*query), torch.arange(q.numel(),
                                                                                                device=q.device))
        if exact:
            full = torch.zeros(rows.shape[0], W, dtype=torch.float64, device=rows.device)
            full[:, :V] = rows
            return exact_logits(full), inv
        logits = torch.full((rows.shape[0], W), float("-inf"), dtype=dtype, device=rows.device)
        logits[:, :V] = rows.to(dtype).log()
        return logits, inv
