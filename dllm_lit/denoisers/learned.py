"""A learned denoiser from a Hugging Face checkpoint, behind the same interface as the oracle.

The model sees the chain's token ids with the MASK (id V) mapped to the model's mask token and
returns logits; the denoiser takes the first V logits (the chain's vocabulary) and applies the
SUBS parameterisation of MDLM (see ``docs/samplers/mdlm.md``): log-softmax over the real
vocabulary at masked positions (no mass on MASK), one-hot at unmasked positions (carry-over).
Swapping it for :class:`OracleDenoiser` in a sampler measures denoiser + sampler error; the
difference to the oracle run isolates the denoiser's share.

    model:
      class_path: dllm_lit.samplers.MDLM
      init_args:
        denoiser:
          class_path: dllm_lit.denoisers.HFDenoiser
          init_args: {model_name_or_path: /path/to/checkpoint}

The vocabulary size V is taken from the chain when the run is wired (``vocab_size`` may be given
to check it).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser, check_tokens

__all__ = ["HFDenoiser"]


class HFDenoiser(Denoiser):
    """Wrap a Hugging Face masked LM (``AutoModelForMaskedLM`` or any model returning ``.logits``).

    Args:
        model_name_or_path: hub name or local directory of the checkpoint.
        vocab_size: V, the chain's vocabulary size (default: taken from the chain at wiring); the
            model's logits must cover ids [0, V).
        mask_token_id: the model's mask id (default: the tokenizer-free convention id V).
        trust_remote_code: allow custom model code (e.g. MDLM/LLaDA checkpoints).
        batch_size: rows per forward pass.
    """

    def __init__(self, model_name_or_path: str, vocab_size: int | None = None, mask_token_id: int | None = None,
                 trust_remote_code: bool = False, batch_size: int = 32) -> None:
        super().__init__()
        checks.optional_integer("vocab_size", vocab_size)
        checks.optional_integer("mask_token_id", mask_token_id, minimum=0)
        checks.integer("batch_size", batch_size)
        self.model_name_or_path = model_name_or_path
        from transformers import AutoModelForMaskedLM

        try:
            self.model = AutoModelForMaskedLM.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as exc:
            raise OSError(
                f"cannot load the denoiser checkpoint {model_name_or_path!r}: {exc}. Without network access, "
                "download it beforehand (HF cache, then set HF_HUB_OFFLINE=1) or pass a local directory."
            ) from exc
        self.mask_token_id = mask_token_id
        self.batch_size = batch_size
        self.model.eval().requires_grad_(False)
        self.vocab_size = None
        if vocab_size is not None:
            self._check_vocabulary(vocab_size)
            self.vocab_size = vocab_size

    @property
    def model_mask_id(self) -> int:
        """The id the model reads at masked positions (default: V, the chain's MASK id)."""
        return self.mask_id if self.mask_token_id is None else int(self.mask_token_id)

    def _check_vocabulary(self, V: int) -> None:
        """The model must predict ids [0, V) and read its mask id."""
        head = self.model.get_output_embeddings()
        out_dim = head.weight.shape[0] if head is not None else None
        if out_dim is not None and out_dim < V:
            raise ValueError(f"the checkpoint predicts {out_dim} tokens but the chain has {V}; "
                             "the model's vocabulary must cover the chain's token ids")
        mask = V if self.mask_token_id is None else int(self.mask_token_id)
        emb = self.model.get_input_embeddings()
        in_dim = emb.weight.shape[0] if emb is not None else None
        if in_dim is not None and mask >= in_dim:
            raise ValueError(f"the checkpoint reads {in_dim} input ids but its mask id is {mask} (chain vocabulary {V}); "
                             "set mask_token_id to the model's mask token or use a model with V + 1 input ids")

    def bind(self, chain) -> "HFDenoiser":
        """Take V from the chain (or check it) and check that the model fits that vocabulary."""
        self._check_vocabulary(chain.vocab_size)
        return super().bind(chain)

    def describe(self) -> dict:
        return {"denoiser": "hf", "model_name_or_path": str(self.model_name_or_path)}

    @torch.no_grad()
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0 | z): Tensor[B, T, V], SUBS parameterisation (see module docstring)."""
        check_tokens(z, self.vocab_size)
        V = self.vocab_size
        masked = z == self.mask_id
        ids = torch.where(masked, torch.full_like(z, self.model_mask_id), z)
        outs = []
        for start in range(0, z.shape[0], self.batch_size):
            logits = self.model(input_ids=ids[start:start + self.batch_size]).logits[..., :V]
            outs.append(torch.log_softmax(logits.float(), dim=-1))
        logp = torch.cat(outs)
        onehot = torch.full_like(logp, float("-inf")).scatter_(-1, z.clamp(max=V - 1)[..., None], 0.0)
        return torch.where(masked[..., None], logp, onehot)

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """Runs the model on the rows involved only, then gathers the positions."""
        rows, inverse = torch.unique(batch_index, return_inverse=True)
        return self.forward(z[rows])[inverse, position_index]
