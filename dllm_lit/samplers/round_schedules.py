"""Round sizes of the random-order samplers (paper MDLM, LLaDA random remasking): the ``schedule`` option.

* ``"uniform"`` (default): LLaDA's transfer counts, n // S per step and one more in the first n % S steps;
* ``"optimal"``: the round sizes that minimise the exact expected KL(chain || sampler | order) for the run's
  chain, segment length and step budget (:func:`dllm_lit.theory.optimal_schedule`; needs the chain);
* ``"tc"`` / ``"dtc"``: the templates minimising the TC / DTC bound on that KL for the segment length and
  step budget (:func:`dllm_lit.theory.template_schedule`; chain-free: rounds shrink towards the end / grow
  from one position);
* a list of S round sizes (integers >= 0 summing to the segment length), used as given.

The schedule never changes which law a round's tokens are drawn from, only how many positions each
round reveals; with ``"uniform"`` the draws are those of the samplers without the option.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dllm_lit.samplers.reference_scoring import chain_information
from dllm_lit.samplers.selection import transfer_schedule

__all__ = ["SCHEDULES", "check_schedule", "check_round_counts", "round_counts", "THEORY_MAX_VOCAB"]

SCHEDULES = ("uniform", "optimal", "tc", "dtc")
#: the exact theory (and the "optimal" schedule) is computed for chains with at most this many tokens
#: (dense V x V powers, V^2 work per distance)
THEORY_MAX_VOCAB = 512


#: optimal round sizes by (chain fingerprint, length, steps, left_revealed), computed once per process
_OPTIMAL: dict[tuple[str, int, int, bool], list[int]] = {}


def check_schedule(value: Any) -> str | list[int]:
    """``"uniform"``, ``"optimal"``, ``"tc"``, ``"dtc"`` or a non-empty list of integers >= 0; anything else: one-line ValueError."""
    if isinstance(value, str) and value in SCHEDULES:
        return value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) > 0 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return [int(v) for v in value]
    raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)} or a list of round sizes (integers >= 0), "
                     f"got {value!r}")


def check_round_counts(schedule: str | list[int], chain, length: int, steps: int,
                       names: tuple[str, str] = ("seq_len", "steps")) -> None:
    """What :func:`round_counts` would refuse, found without computing a schedule: a list that does not fit, a
    chain without the exact theory, or a computed schedule too large for this machine's memory or for
    :data:`~dllm_lit.engine.budget.SETUP_SECONDS` (named by ``names``, the caller's fields for length and steps)."""
    if isinstance(schedule, list):
        round_counts(schedule, chain, length, steps)
    elif schedule == "optimal":
        from dllm_lit.theory.information import check_curve_size
        from dllm_lit.theory.schedules import check_optimal_size

        _theory_chain(chain)
        check_curve_size(length, names[0])
        check_optimal_size(length, steps, names)
    elif schedule in ("tc", "dtc"):
        from dllm_lit.theory.bounds import check_template_size

        check_template_size(length, steps, names)


def _theory_chain(chain) -> None:
    if chain is None or chain.vocab_size > THEORY_MAX_VOCAB:
        raise ValueError(f"schedule='optimal' needs a chain with at most {THEORY_MAX_VOCAB} tokens "
                         f"(the exact theory), got {None if chain is None else chain.vocab_size}")


def round_counts(schedule: str | list[int], chain, length: int, steps: int, left_revealed: bool = False) -> list[int]:
    """The ``steps`` round sizes of a segment of ``length`` positions (sum = length) under ``schedule``."""
    if schedule == "uniform":
        return transfer_schedule(length, steps)
    if schedule in ("tc", "dtc"):
        from dllm_lit.theory import template_schedule

        return template_schedule(schedule, length, steps)
    if schedule == "optimal":
        _theory_chain(chain)
        key = (chain.fingerprint, int(length), int(steps), bool(left_revealed))
        if key not in _OPTIMAL:
            from dllm_lit.theory import optimal_schedule

            sizes, _ = optimal_schedule(chain_information(chain).curve(length, left_revealed), steps)
            _OPTIMAL[key] = sizes + [0] * (steps - len(sizes))
        return list(_OPTIMAL[key])
    if len(schedule) != steps or sum(schedule) != length:
        raise ValueError(f"schedule {schedule} must have one round size per step ({steps}) summing to the "
                         f"positions decoded ({length}), got {len(schedule)} sizes summing to {sum(schedule)}")
    return list(schedule)
