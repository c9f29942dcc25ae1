"""Exact output laws of sampler rules on tiny chains, by dynamic programming over partially masked states.

The references of the samplers' law tests and of ``python cli.py conform`` (:mod:`dllm_lit.conformance`).
:data:`LAWS` names the rules the command line offers; each takes ``(chain, T, **options)``.
"""
from dllm_lit.exact.confidence import (TIE_DECIMALS, klass_law, maskgit_keep, maskgit_law, plackett_luce_sets,
                                       proposal_options, transfer_counts)
from dllm_lit.exact.core import (PosteriorCache, State, all_sequences, argmax_fill_law, chain_law, law_vector,
                                 product_step)
from dllm_lit.exact.mdlm import block_mdlm_law, mdlm_law, nucleus_row
from dllm_lit.exact.rules import dream_origin_law, eb_law, fast_dllm_law, llada_law
from dllm_lit.exact.score_select import (Selection, plackett_luce_choice, ranked_choice, score_select_law,
                                         tempered_options)


def _block_mdlm(chain, T, **options):
    return block_mdlm_law(chain, T, **options)[0]


#: rule name -> law(chain, T, **options) over V^T sequences (lexicographic order)
LAWS = {
    "chain": chain_law,  # exact sampling: AR, FHS
    "mdlm": mdlm_law,
    "block_mdlm": _block_mdlm,
    "llada": llada_law,
    "fast_dllm": fast_dllm_law,
    "eb": eb_law,
    "dream_origin": dream_origin_law,
    "maskgit": maskgit_law,
    "klass": klass_law,
}

__all__ = ["LAWS", "PosteriorCache", "Selection", "State", "TIE_DECIMALS", "all_sequences", "argmax_fill_law",
           "block_mdlm_law", "chain_law", "dream_origin_law", "eb_law", "fast_dllm_law", "klass_law", "law_vector", "llada_law",
           "maskgit_keep", "maskgit_law", "mdlm_law", "nucleus_row", "plackett_luce_choice", "plackett_luce_sets",
           "product_step", "proposal_options", "ranked_choice", "score_select_law", "tempered_options",
           "transfer_counts"]
