"""diffusers' LLaDA2Pipeline + BlockRefinementScheduler, unchanged, on the exact oracle and the chain's tokenizer.

    pip install -e ".[diffusers]"
    python examples/diffusers_llada2.py --prompt "in the beginning" --gen-length 64

Runs offline: the model is the English chain's :class:`~dllm_lit.hf.OracleForMaskedLM` (``revealed:
leave_one_out``, so that ``editing_threshold`` can fire: a revealed token's logits are p(x_i | the other
tokens)), the tokenizer :func:`~dllm_lit.hf.tokenizer.chain_tokenizer`.  Measuring the pipeline's law over many
sequences is ``python cli.py predict --config examples/diffusers_llada2.yaml`` (docs/oracle_model.md).
"""
from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> list[str]:
    from diffusers import BlockRefinementScheduler, LLaDA2Pipeline

    from dllm_lit.hf import OracleForMaskedLM
    from dllm_lit.hf.tokenizer import chain_tokenizer
    from dllm_lit.sources import EnglishChars

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", default="in the beginning")
    ap.add_argument("--gen-length", type=int, default=64)
    ap.add_argument("--block-length", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8, help="refinement steps per block")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--editing-threshold", type=float, default=0.5, help="0 disables editing")
    ap.add_argument("--num-sequences", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    source = EnglishChars()
    model = OracleForMaskedLM.from_chain(source.build(), revealed="leave_one_out")
    tokenizer = chain_tokenizer(source)
    pipe = LLaDA2Pipeline(model=model, scheduler=BlockRefinementScheduler(), tokenizer=tokenizer)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=[ns.prompt] * ns.num_sequences, use_chat_template=False, gen_length=ns.gen_length,
               block_length=ns.block_length, num_inference_steps=ns.steps, temperature=1.0,
               threshold=ns.threshold, editing_threshold=ns.editing_threshold or None, eos_early_stop=False,
               generator=torch.Generator().manual_seed(ns.seed))
    for text in out.texts:
        print(f"{ns.prompt}|{text}")
    return out.texts


if __name__ == "__main__":
    main()
