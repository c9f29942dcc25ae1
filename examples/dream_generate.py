"""Dream's ``diffusion_generate`` sampling loop as its users write it, for a model whose logits are shifted.

Written after the structure of the public Dream sampler (HKUNLP/Dream ``generation_utils.py``, ``_sample`` and
``sample_tokens``; Ye et al., "Dream 7B: Diffusion Large Language Models", arXiv:2508.15487).  Dream's network
comes from an autoregressive model: its logits at position i predict token i + 1, so the loop shifts them right
by one (``cat([logits[:, :1], logits[:, :-1]])``) and needs a prompt token at position 0.  On the oracle model
that layout is ``logit_shift: 1``:

    python cli.py predict --config examples/dream_external.yaml --data.num_sequences 64 --data.seq_len 128
"""
from __future__ import annotations

import torch
import torch.distributions as dists
import torch.nn.functional as F


def sample_tokens(logits: torch.Tensor, temperature: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence, token): a draw from softmax(logits / temperature) (its argmax at 0) and its probability."""
    if temperature > 0:
        logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        x0 = dists.Categorical(probs=probs).sample()
        confidence = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
    else:
        confidence, x0 = probs.max(dim=-1)
    return confidence, x0


@torch.no_grad()
def diffusion_generate(model, prompt: torch.Tensor, steps: int = 512, max_new_tokens: int = 512,
                       temperature: float = 0.0, alg: str = "origin", eps: float = 1e-3,
                       mask_token_id: int = 151666) -> torch.Tensor:
    """Prompt [B, P] (P >= 1) -> sequences [B, P + max_new_tokens]; ``alg`` "origin" or "maskgit_plus"."""
    x = F.pad(prompt, (0, max_new_tokens), value=mask_token_id)
    timesteps = torch.linspace(1, eps, steps + 1, device=x.device)
    for i in range(steps):
        mask_index = x == mask_token_id
        logits = model(x, "full", None).logits
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        mask_logits = logits[mask_index]
        t, s = timesteps[i], timesteps[i + 1]
        if alg == "origin":
            p_transfer = 1 - s / t if i < steps - 1 else 1
            x0 = torch.zeros_like(x[mask_index], device=x.device, dtype=torch.long) + mask_token_id
            transfer_index_t_s = torch.rand(*x0.shape, device=x.device) < p_transfer
            _, x0[transfer_index_t_s] = sample_tokens(mask_logits[transfer_index_t_s], temperature=temperature)
            x[mask_index] = x0.clone()
        elif alg == "maskgit_plus":
            confidence, x0 = sample_tokens(mask_logits, temperature=temperature)
            num_mask_token = mask_index.sum() / mask_index.shape[0]
            number_transfer_tokens = int(num_mask_token * (1 - s / t)) if i < steps - 1 else int(num_mask_token)
            full_confidence = torch.full_like(x, -torch.inf, device=x.device, dtype=logits.dtype)
            full_confidence[mask_index] = confidence
            if number_transfer_tokens > 0:
                _, transfer_index = torch.topk(full_confidence, number_transfer_tokens)
                x_ = torch.zeros_like(x, device=x.device, dtype=torch.long) + mask_token_id
                x_[mask_index] = x0.clone()
                row_indices = torch.arange(x.size(0), device=x.device).unsqueeze(1).expand_as(transfer_index)
                x[row_indices, transfer_index] = x_[row_indices, transfer_index]
        else:
            raise NotImplementedError(alg)
    return x
