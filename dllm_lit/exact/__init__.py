"""Exact output laws of sampler rules on tiny chains, by dynamic programming over partially masked states.

The references of the samplers' law tests and of ``python cli.py conform`` (:mod:`dllm_lit.exact.conformance`).
:data:`LAWS` names the rules the command line offers; each takes ``(chain, T, **options)``.
"""
import torch

from dllm_lit.exact.confidence import (TIE_DECIMALS, klass_law, maskgit_keep, maskgit_law, plackett_luce_sets,
                                       proposal_options, transfer_counts)
from dllm_lit.exact.core import (PosteriorCache, State, all_sequences, argmax_fill_law, chain_law, law_vector,
                                 product_step)
from dllm_lit.exact.dream import DREAM_ALGS, dream_counts, dream_law, dream_origin_law, dream_token_law
from dllm_lit.exact.mdlm import block_mdlm_law, mdlm_law, mdlm_paper_law, nucleus_row
from dllm_lit.exact.rules import eb_law, fast_dllm_law, llada_law, pc_law
from dllm_lit.exact.score_select import (Selection, plackett_luce_choice, ranked_choice, score_select_law,
                                         tempered_options)
from dllm_lit.exact.sedd import sedd_law
from dllm_lit.exact.subsets import random_order_steps_law, random_subset_step
from dllm_lit.exact.uniform_state import bayes_step_law, duo_law, gidd_law, psi_law, sedd_uniform_law


def _block_mdlm(chain, T: int, block_size: int, steps: int, grid: str = "bd3", nucleus_p: float = 1.0,
                first_hitting: bool = False) -> torch.Tensor:
    """:func:`block_mdlm_law`'s law, refused when a nucleus cut lies within 1e-6 of ``nucleus_p`` (ill-posed)."""
    law, margin = block_mdlm_law(chain, T, block_size, steps, grid, nucleus_p, first_hitting)
    if margin <= 1e-6:
        raise ValueError(f"a cumulative mass lies within 1e-6 of nucleus_p {nucleus_p}: ill-posed")
    return law


#: rule name -> law(chain, T, **options) over V^T sequences (lexicographic order)
LAWS = {
    "chain": chain_law,  # exact sampling: AR, FHS
    "mdlm": mdlm_law,
    "mdlm_paper": mdlm_paper_law,  # the paper's "MDLM": LLaDA random remasking, temperature 1
    "block_mdlm": _block_mdlm,
    "llada": llada_law,
    "fast_dllm": fast_dllm_law,
    "eb": eb_law,
    "dream": dream_law,  # every alg: origin, maskgit_plus, topk_margin, entropy
    "dream_origin": dream_origin_law,
    "pc_sampler": pc_law,
    "sedd": sedd_law,
    "maskgit": maskgit_law,
    "klass": klass_law,
}

#: the allowed values of the laws' string options (checked by ``python cli.py conform``)
OPTION_CHOICES = {
    "tie_rule": ("lowest", "highest", "random"),
    "remasking": ("low_confidence", "random"),
    "alg": DREAM_ALGS,
    "predictor": ("analytic", "euler"),
    "grid": ("bd3", "mdlm"),
    "schedule": ("cosine", "linear"),
}

__all__ = ["DREAM_ALGS", "LAWS", "OPTION_CHOICES", "PosteriorCache", "Selection", "State", "TIE_DECIMALS", "all_sequences",
           "argmax_fill_law", "block_mdlm_law", "chain_law", "dream_counts", "dream_law", "dream_origin_law",
           "dream_token_law", "eb_law", "fast_dllm_law", "klass_law", "law_vector", "llada_law", "maskgit_keep",
           "maskgit_law", "mdlm_law", "mdlm_paper_law", "nucleus_row", "pc_law", "plackett_luce_choice",
           "plackett_luce_sets", "product_step", "proposal_options", "random_order_steps_law", "random_subset_step", "ranked_choice", "score_select_law",
           "sedd_law", "tempered_options", "transfer_counts"]
__all__ += ["bayes_step_law", "duo_law", "gidd_law", "psi_law", "sedd_uniform_law"]  # uniform-state samplers
