"""LLaDA's ``generate()`` as its users write it, against any Hugging Face-style masked LM.

Written after the structure of the public LLaDA sampler (GSAI-ML/LLaDA ``generate.py``; Nie et al., "Large
Language Diffusion Models", arXiv:2502.09992): blocks left to right, a fixed number of tokens per step, Gumbel-max
proposals from ``logits / temperature``, confidence ``softmax(logits)[proposal]`` (or a uniform for random
remasking), the top-k confident masked positions of the block commit.  It knows nothing of dllm_lit: run it on
the exact oracle with

    python cli.py predict --config examples/llada_external.yaml

or judge it with ``python cli.py conform`` (README, "Test your own sampler code").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def add_gumbel_noise(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """exp(logits) / E^temperature with E ~ Exp(1), in float64: its argmax samples softmax(logits / temperature)."""
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    noise = torch.rand_like(logits, dtype=torch.float64)
    return logits.exp() / (-torch.log(noise)) ** temperature


def get_num_transfer_tokens(mask_index: torch.Tensor, steps: int) -> torch.Tensor:
    """Tokens to commit at each of ``steps`` steps: an even split of the masked count, the remainder first."""
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base, remainder = mask_num // steps, mask_num % steps
    num = torch.zeros(mask_num.size(0), steps, device=mask_index.device, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num[i, : int(remainder[i])] += 1
    return num


@torch.no_grad()
def generate(model, prompt: torch.Tensor, steps: int = 128, gen_length: int = 128, block_length: int = 128,
             temperature: float = 0.0, remasking: str = "low_confidence", mask_id: int = 126336) -> torch.Tensor:
    """Prompt [B, P] -> sequences [B, P + gen_length]."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, : prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    for num_block in range(num_blocks):
        start = prompt.shape[1] + num_block * block_length
        block_mask_index = x[:, start : start + block_length] == mask_id
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = x == mask_id
            logits = model(x).logits
            x0 = torch.argmax(add_gumbel_noise(logits, temperature), dim=-1)
            if remasking == "low_confidence":
                p = F.softmax(logits, dim=-1)
                x0_p = torch.gather(p, dim=-1, index=x0.unsqueeze(-1)).squeeze(-1)
            elif remasking == "random":
                x0_p = torch.rand(x0.shape, device=x0.device)
            else:
                raise NotImplementedError(remasking)
            x0_p[:, start + block_length :] = -float("inf")
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -float("inf"))
            transfer_index = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(confidence.shape[0]):
                _, select_index = torch.topk(confidence[j], k=int(num_transfer_tokens[j, i]))
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
    return x
