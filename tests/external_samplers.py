"""User-side sampler functions for the ExternalSampler tests: a broken LLaDA copy and functions that misbehave."""
from __future__ import annotations

import torch

from dllm_lit.samplers import MDLM
from examples import llada_generate


def generate_k_off_by_one(model, prompt, **kwargs):
    """The LLaDA example with one step's k off by one: the first step of each block commits one token fewer and
    the last one more (a deliberately broken copy, which conformance must catch)."""
    exact = llada_generate.get_num_transfer_tokens

    def shifted(mask_index, steps):
        num = exact(mask_index, steps)
        num[:, 0] -= 1
        num[:, -1] += 1
        return num

    llada_generate.get_num_transfer_tokens = shifted
    try:
        return llada_generate.generate(model, prompt, **kwargs)
    finally:
        llada_generate.get_num_transfer_tokens = exact


def wrong_shape(model, prompt, gen_length, steps, mask_id):
    return torch.zeros(prompt.shape[0], gen_length + 3, dtype=torch.long)


def out_of_range(model, prompt, gen_length, steps, mask_id):
    return torch.full((prompt.shape[0], gen_length), mask_id + 1, dtype=torch.long)


def masks_left(model, prompt, gen_length, steps, mask_id):
    x = torch.zeros(prompt.shape[0], gen_length, dtype=torch.long)
    x[0, -1] = mask_id
    return x


def float_ids(model, prompt, gen_length, steps, mask_id):
    return torch.zeros(prompt.shape[0], gen_length)


def raises_at_four_steps(model, prompt, gen_length, steps, mask_id):
    """Exact chain samples drawn position by position from the model (one call per position); fails at steps = 4."""
    if steps == 4:
        raise KeyError("no schedule for 4 steps")
    x = torch.full((prompt.shape[0], gen_length), mask_id, dtype=torch.long)
    for i in range(gen_length):
        p = torch.softmax(model(x).logits[:, i].double(), -1)
        x[:, i] = torch.multinomial(p, 1)[:, 0]
    return x


def plain_generate(model, prompt, gen_length, steps, mask_id):
    """A user's plain LLaDA-style loop: ``torch.softmax(model(x).logits, -1)``, a multinomial draw per position,
    then the ``k`` most confident masked positions (``torch.topk``) commit; ``k`` = LLaDA's even split, the
    remainder first (one block, temperature 1)."""
    B = prompt.shape[0]
    x = torch.cat([prompt, torch.full((B, gen_length), mask_id, dtype=torch.long)], 1)
    counts = [gen_length // steps + (i < gen_length % steps) for i in range(steps)]
    for k in counts:
        masked = x == mask_id
        p = torch.softmax(model(x).logits, -1)
        x0 = torch.multinomial(p.view(-1, p.shape[-1]), 1).view(x.shape)
        conf = torch.where(masked, torch.gather(p, -1, x0[..., None])[..., 0], -torch.inf)
        pick = torch.topk(conf, k, dim=-1).indices
        x.scatter_(1, pick, x0.gather(1, pick))
    return x


def exits(model, prompt, gen_length, steps, mask_id):
    """A user's sampler that ends the process as if it had succeeded."""
    raise SystemExit(0)


def hangs(model, prompt, gen_length, steps, mask_id):
    """A user's sampler that never returns, and swallows every ordinary exception on its way."""
    import time

    while True:
        try:
            time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the misbehaviour under test
            pass


class ExitingMDLM(MDLM):
    """A user's own sampler class whose draw raises SystemExit(0)."""

    sampler_name = "exiting_mdlm"

    def generate_with_stats(self, indices, seq_len, steps, seed):
        raise SystemExit(0)
