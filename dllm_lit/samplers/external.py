"""A sampler that lives in the user's own code, run unchanged on the exact oracle (docs/oracle_model.md).

``ExternalSampler`` builds the chain's :class:`~dllm_lit.hf.OracleForMaskedLM` and, for each work item, calls

* ``generate="pkg.mod:fn"``: ``fn(model, prompt, **kwargs)`` - LLaDA's calling convention - with ``prompt`` the
  [B, P] prompt ids (P = ``prompt_length``, possibly 0) and ``kwargs`` the user's options plus the generation
  length, the step count and the mask id under the names ``length_kwarg``, ``steps_kwarg`` and ``mask_kwarg``;
* or ``pipeline="pkg.mod:Pipeline"`` (with ``scheduler="pkg.mod:Scheduler"`` and ``scheduler_kwargs``): a
  diffusers-style pipeline ``Pipeline(model=..., scheduler=..., tokenizer=None)`` called with
  ``input_ids=prompt``, ``output_type="seq"`` and the same injected options; its ``.sequences`` are the result.

The result must be an integer tensor [B, T] (or [B, T - P] without the prompt) of chain ids: shape, dtype, id
range and left-over mask ids are checked, and any failure - including an exception inside the user's code, a
``SystemExit`` it raises or a call past ``timeout`` seconds - ends with one line naming the function
(:class:`ExternalSamplerError`); rows finished before it stay on disk.

Randomness: the user's code draws from torch's global RNG (and CUDA's), seeded for each work item from (seed,
steps, first sequence index of the item).  So, unlike the native samplers, a sequence's sample depends on the
chunking (``data.chunk_size``) - results are reproducible for a fixed chunk size, not across chunk sizes.
NFE: the model's forward calls during the item, counted for every sequence of the item.
Prompts: the first P tokens of an exact chain sample per sequence (Stream.PROMPT), so the full sequence
(prompt + generated) has the chain's law when the sampler is exact, and every metric applies to it; in a prompted
run (:mod:`dllm_lit.experiments.prompted`) the prompt's prefix instead (``given_prompt``, P its length).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from dllm_lit import checks, rng
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.external_io import ExternalSamplerError, checked_samples, resolve
from dllm_lit.util.user_code import user_code

__all__ = ["ExternalSampler", "ExternalSamplerError", "resolve"]


class ExternalSampler(Sampler):
    """The user's own sampler code on the exact oracle model (module docstring).

    Args:
        steps: step counts (one results row each), passed as ``steps_kwarg``.
        generate: ``"pkg.mod:fn"``, called ``fn(model, prompt, **kwargs)``.
        pipeline: ``"pkg.mod:Pipeline"`` instead of ``generate``; ``scheduler`` its scheduler class.
        kwargs: the user's options for each call (e.g. ``{block_length: 32, temperature: 1.0}``).
        length_kwarg / steps_kwarg / mask_kwarg: names under which the generation length, the step count and
            the mask id are passed (None: not passed).
        prompt_length: P >= 0 prompt tokens (an exact chain prefix) per sequence.
        model_options: :class:`~dllm_lit.hf.OracleConfig` options (``revealed``, ``logit_shift``, ...).
        name: the results rows' name (default ``external_<function or pipeline name>``).
        timeout: seconds one call of the user's code may take (None: no limit); past it the run ends with one
            line, as it does when that code raises ``SystemExit`` or ``KeyboardInterrupt``
            (:mod:`dllm_lit.util.user_code`).
    """

    #: options the row label leaves out: the function is in the name, the argument names are bookkeeping
    label_skip = ("generate", "pipeline", "length_kwarg", "steps_kwarg", "mask_kwarg", "name")

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 8, generate: str | None = None,
                 pipeline: str | None = None, scheduler: str | None = None,
                 scheduler_kwargs: dict[str, Any] | None = None, kwargs: dict[str, Any] | None = None,
                 length_kwarg: str | None = None, steps_kwarg: str | None = None, mask_kwarg: str | None = None,
                 prompt_length: int = 0, model_options: dict[str, Any] | None = None, name: str | None = None,
                 timeout: float | None = None) -> None:
        super().__init__(None, steps)
        if denoiser is not None:
            raise ValueError("denoiser must be null for ExternalSampler: it runs the user's code on the exact "
                             "oracle model")
        if (generate is None) == (pipeline is None):
            raise ValueError("ExternalSampler needs exactly one of generate ('pkg.mod:fn') and pipeline "
                             "('pkg.mod:Pipeline')")
        if scheduler is not None and pipeline is None:
            raise ValueError("scheduler is used only with pipeline")
        self.generate_path, self.pipeline, self.scheduler = generate, pipeline, scheduler
        self.fn: Callable[..., Any] = resolve("generate", generate) if generate else resolve("pipeline", pipeline)
        self.scheduler_cls = resolve("scheduler", scheduler) if scheduler else None
        self.scheduler_kwargs = checks.optional_mapping("scheduler_kwargs", scheduler_kwargs)
        self.kwargs = checks.optional_mapping("kwargs", kwargs)
        default = ("gen_length", "steps", "mask_id") if generate else ("gen_length", "num_inference_steps",
                                                                       "mask_token_id")
        given = {"length_kwarg": length_kwarg, "steps_kwarg": steps_kwarg, "mask_kwarg": mask_kwarg, "name": name}
        for field, value in given.items():
            if value is not None:
                checks.nonempty_str(field, value)
        self.length_kwarg = length_kwarg if length_kwarg is not None else default[0]
        self.steps_kwarg = steps_kwarg if steps_kwarg is not None else default[1]
        self.mask_kwarg = mask_kwarg if mask_kwarg is not None else default[2]
        self.prompt_length = checks.integer("prompt_length", prompt_length, minimum=0)
        self.model_options = checks.optional_mapping("model_options", model_options)
        self.label = (generate or pipeline).replace(":", ".").rsplit(".", 1)[-1]
        self.sampler_name = name if name is not None else f"external_{self.label}"
        self.model = None
        self.name_option = name
        self.timeout = checks.optional_real("timeout", timeout, 0.0, low_open=True)

    #: the prompt [P] of every sequence (a prompted run sets it with prompt_length = P); None: drawn (Stream.PROMPT)
    given_prompt: torch.Tensor | None = None

    @property
    def name(self) -> str:
        return self.sampler_name

    def settings(self) -> dict[str, Any]:
        """The constructor options (the row settings: resume refuses rows of another function or options)."""
        out = super().settings()
        out["generate"], out["name"] = self.generate_path, self.name_option
        del out["timeout"]  # a time limit changes no sample
        return out

    def connect(self, chain, cache_dir=None) -> "ExternalSampler":
        """Build the oracle model of ``chain`` (a first-order chain, its power table cached in ``cache_dir``, or an
        HMM world: order-k, switching, hidden-state)."""
        from dllm_lit.hf import OracleForMaskedLM
        from dllm_lit.markov import HMMWorld, MarkovChain

        if not isinstance(chain, (MarkovChain, HMMWorld)):
            raise ValueError(f"ExternalSampler runs on a MarkovChain or an HMMWorld, got {type(chain).__name__}")
        self.chain = chain
        self.model = OracleForMaskedLM.from_world(chain, cache_dir=cache_dir, **self.model_options).to(self.device)
        self.denoiser = self.model.oracle(self.model.dtype, self.device)
        self.check_options()
        return self

    def check_run(self, seq_len: int, steps: int | None) -> None:
        if self.prompt_length >= seq_len:
            raise ValueError(f"prompt_length ({self.prompt_length}) must be less than data.seq_len ({seq_len})")

    # ------------------------------------------------------------------ one work item
    def _prompt(self, indices: torch.Tensor, seed: int) -> torch.Tensor:
        B, P = indices.numel(), self.prompt_length
        if self.given_prompt is not None:
            return self.given_prompt.to(self.device).long().reshape(1, P).expand(B, -1).clone()
        if P == 0:
            return torch.zeros(B, 0, dtype=torch.long, device=self.device)
        pseed = int(rng.mix64(torch.tensor([seed ^ rng.Stream.PROMPT]))[0])
        rows = [self.chain.sample(1, P, seed=pseed, start_index=int(i)) for i in indices.tolist()] \
            if not bool((indices.diff() == 1).all()) else [self.chain.sample(B, P, seed=pseed, start_index=int(indices[0]))]
        return torch.cat(rows).to(self.device)

    def _item_seed(self, indices: torch.Tensor, steps: int | None, seed: int) -> int:
        key = rng.sequence_keys(seed, indices[:1].cpu(), rng.Stream.ORDER)
        return int(rng.mix64(key ^ int(steps or 0))[0]) & (2**63 - 1)

    def _call(self, prompt: torch.Tensor, seq_len: int, steps: int | None) -> Any:
        kw = dict(self.kwargs)
        for name, value in ((self.length_kwarg, seq_len - self.prompt_length), (self.steps_kwarg, steps),
                            (self.mask_kwarg, self.model.config.mask_token_id)):
            if name:
                kw[name] = value
        if self.generate_path:
            return self.fn(self.model, prompt, **kw)
        sched = self.scheduler_cls(**self.scheduler_kwargs) if self.scheduler_cls is not None else None
        pipe = self.fn(model=self.model, scheduler=sched, tokenizer=None)
        if hasattr(pipe, "set_progress_bar_config"):
            pipe.set_progress_bar_config(disable=True)
        kw.setdefault("output_type", "seq")
        kw.setdefault("use_chat_template", False)
        out = pipe(input_ids=prompt, **kw)
        return getattr(out, "sequences", out)

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int | None,
                          seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.model is None:
            raise ValueError("ExternalSampler is not connected to a chain: call connect(chain) first")
        prompt = self._prompt(indices, seed)
        devices = [self.device] if self.device.type == "cuda" else []
        calls = self.model.calls
        who = self.generate_path or self.pipeline
        with torch.random.fork_rng(devices=devices), user_code(who, self.timeout, "timeout", ExternalSamplerError):
            s = self._item_seed(indices, steps, seed)
            torch.manual_seed(s)
            self.model.set_jitter_seed(s)
            try:
                x = self._call(prompt, seq_len, steps)
            except ExternalSamplerError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's code: report it in one line, naming it
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise ExternalSamplerError(f"{who} raised {type(exc).__name__}: {msg}") from exc
        x = checked_samples(x, prompt, seq_len, self.vocab_size, self.model.config.mask_token_id, who)
        nfe = torch.full((indices.numel(),), float(self.model.calls - calls), dtype=torch.float64)
        return x, nfe

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        return None  # counted per work item (generate_with_nfe)
