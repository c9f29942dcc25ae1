r"""ParallelBench-style prompted list tasks as worlds (*ParallelBench: Understanding the Trade-offs of Parallel
Decoding in Diffusion LLMs*, Kang et al., arXiv 2510.04767; task generators of ``furiosa-ai/ParallelBench``,
``dataset/parallel_bench/data/task.py``).

Tokens are ``items`` symbols (``domino``: two-digit numbers over ``items`` digits, token a * items + b).  A
prompt and its answer law:

| task | prompt (uniform) | answer law given the prompt | answer tokens |
| --- | --- | --- | --- |
| ``copy`` | n distinct items L | L | n |
| ``replace`` | n distinct items L, then a new item w | L with one uniform position replaced by w | n |
| ``shuffle`` | n distinct items L | a uniform permutation of L | n |
| ``domino`` | one number (a, e_0) | (e_0, e_1), (e_1, e_2), .., e_i uniform digits | n |

(ParallelBench's own shuffle generator redraws the identity and its domino uses the digits 1-9; here the
identity is one of the n! answers and the digits are 0..items-1, the laws whose parallel accuracy has a
closed form.)  An answer is correct exactly when it has positive probability given its prompt.

The world (:func:`task_world`) is the answer law given one prompt (``prompt`` given, or drawn from the prompt law
with ``prompt_seed``): the prompt is the evidence, the answer positions are masked, and every sampler's output is
scored by ``task_accuracy``.  ``conditional=False`` gives the joint law of [prompt | answer] instead.  Both are
:class:`~dllm_lit.markov.finite_support.SupportWorld` (exact posterior under any masking, by forward-backward
over the task's minimal automaton).

**Closed-form parallel accuracy** (:func:`parallel_accuracy`): a sampler that reveals a uniformly random order of
the n answer positions in rounds of k_1, .., k_m tokens, each drawn independently from its exact marginal given
the revealed ones (paper MDLM), answers correctly with probability

    copy     1
    shuffle  prod_r (n_r)! / ((n_r - k_r)! n_r^k_r)                  n_r = positions left before round r
    replace  A(n; k_1..k_m),  A(r; k, rest) = (1 - 1/r)^k A(r - k; rest) + (k / r)(1 - 1/r)^(k - 1),  A(0; .) = 0
    domino   E[items^(-X)],  X = #{i : answer tokens i and i + 1 revealed in the same round}

(shuffle: the r positions left are each uniform over the r items left, and the round must draw distinct ones;
replace: until w appears every position left holds it with probability 1/r, a round must draw it at most once
and the last round exactly once; domino: tokens i and i + 1 share the digit e_i, which both draw uniformly when
revealed together and agree with probability 1/items).  Exact rationals; derived here.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from dllm_lit import checks
from dllm_lit.markov.finite_support import MAX_SUPPORT, SupportWorld, support_world
from dllm_lit.sources.base import ChainSource

__all__ = ["TASKS", "ListTask", "task_world", "task_prompts", "task_answers", "answer_correct", "parallel_accuracy",
           "prompt_length", "task_vocab_size"]

TASKS = ("copy", "replace", "shuffle", "domino")
#: states of the domino accuracy's dynamic programme (rounds x prod(k_r + 1))
MAX_DP_STATES = 2_000_000


def prompt_length(task: str, length: int) -> int:
    return {"copy": length, "shuffle": length, "replace": length + 1, "domino": 1}[task]


def task_vocab_size(task: str, items: int) -> int:
    return items * items if task == "domino" else items


def _answer_count(task: str, items: int, length: int) -> int:
    return {"copy": 1, "replace": length, "shuffle": math.factorial(length), "domino": items ** length}[task]


def _prompt_count(task: str, items: int, length: int) -> int:
    if task == "domino":
        return items * items
    return math.perm(items, prompt_length(task, length))


def check_task(task: str, items: int, length: int, conditional: bool = True) -> None:
    """One-line refusals of impossible or oversized task parameters, before any work."""
    checks.choice("task", task, TASKS)
    checks.integer("items", items, 2)
    checks.integer("length", length, 1)
    need = prompt_length(task, length)
    if task != "domino" and need > items:
        raise ValueError(f"{task} needs {need} distinct items ({'the list and a new word' if task == 'replace' else 'the list'}), "
                         f"more than items={items}: choose length <= {items - (need - length)}")
    size = _answer_count(task, items, length) * (1 if conditional else _prompt_count(task, items, length))
    if size > MAX_SUPPORT:
        raise ValueError(f"items={items}, length={length}: the {task} world would list {size} sequences, more than "
                         f"{MAX_SUPPORT}; use a smaller length or items")


def task_prompts(task: str, items: int, length: int) -> list[tuple[int, ...]]:
    """Every prompt (they are equally likely)."""
    if task == "domino":
        return [(a,) for a in range(items * items)]
    return list(itertools.permutations(range(items), prompt_length(task, length)))


def task_answers(task: str, prompt: tuple[int, ...], items: int, length: int) -> list[tuple[int, ...]]:
    """Every answer to ``prompt`` (they are equally likely)."""
    if task == "copy":
        return [tuple(prompt)]
    if task == "shuffle":
        return list(itertools.permutations(prompt))
    if task == "replace":
        L, w = list(prompt[:-1]), prompt[-1]
        return [tuple(L[:i] + [w] + L[i + 1:]) for i in range(length)]
    e0 = prompt[0] % items
    return [tuple(a * items + b for a, b in zip((e0,) + e, e)) for e in itertools.product(range(items), repeat=length)]


def answer_correct(task: str, prompt: tuple[int, ...], answer: tuple[int, ...], items: int) -> bool:
    """The task's own check of an answer (ParallelBench's scoring rules, on token ids)."""
    n = len(answer)
    if task == "copy":
        return tuple(answer) == tuple(prompt)
    if task == "shuffle":
        return sorted(answer) == sorted(prompt)
    if task == "replace":
        L, w = prompt[:-1], prompt[-1]
        diff = [i for i in range(n) if answer[i] != L[i]]
        return len(diff) == 1 and answer[diff[0]] == w
    digits = [prompt[0] % items] + [a for t in answer for a in divmod(t, items)]
    return all(digits[2 * i] == digits[2 * i + 1] for i in range(n))  # e_{i} ends token i and starts token i + 1


def check_prompt(task: str, prompt: Any, items: int, length: int) -> tuple[int, ...]:
    """A user prompt as a tuple, refused in one line if it is not a prompt of the task."""
    need = prompt_length(task, length)
    V = items * items if task == "domino" else items
    p = checks.integer_list("prompt", prompt, minimum=0, unique=task != "domino")  # list tasks: distinct items
    if len(p) != need or max(p) >= V:
        raise ValueError(f"prompt must be a list of {need} token ids in [0, {V}) for {task} with length={length}, "
                         f"got {prompt!r}")
    return tuple(p)


def draw_prompt(task: str, items: int, length: int, seed: int) -> tuple[int, ...]:
    """One prompt from the prompt law, a function of ``seed`` only."""
    g = torch.Generator().manual_seed(int(seed))
    if task == "domino":
        return (int(torch.randint(items * items, (1,), generator=g)),)
    return tuple(int(v) for v in torch.randperm(items, generator=g)[: prompt_length(task, length)])


def task_world(task: str, items: int, length: int, prompt: Any = None, prompt_seed: int = 0,
               conditional: bool = True) -> SupportWorld:
    """The task's world: the answer law given ``prompt`` (None: drawn with ``prompt_seed``), or with
    ``conditional=False`` the joint law of [prompt | answer]."""
    check_task(task, items, length, conditional)
    meta = {"source": "list_task", "task": task, "items": items, "length": length}
    if conditional:
        p = draw_prompt(task, items, length, prompt_seed) if prompt is None else check_prompt(task, prompt, items, length)
        seqs = task_answers(task, p, items, length)
        meta["prompt"] = list(p)
    else:
        if prompt is not None:
            raise ValueError("prompt must be null with conditional=false (the joint world draws its prompts)")
        seqs = [p + a for p in task_prompts(task, items, length) for a in task_answers(task, p, items, length)]
    world = support_world(seqs, [1] * len(seqs), task_vocab_size(task, items), metadata=meta)
    world.task, world.items = task, items
    world.prompt = tuple(meta["prompt"]) if conditional else None
    return world


def parallel_accuracy(task: str, counts: list[int], items: int | None = None) -> Fraction:
    """Exact probability that random-order rounds of ``counts`` tokens (summing to the answer length), each token
    drawn from its exact marginal, answer correctly (module docstring).  ``items`` is needed for domino."""
    checks.choice("task", task, TASKS)
    ks = [int(k) for k in counts if int(k) > 0]
    n = sum(ks)
    if task == "copy":
        return Fraction(1)
    if task == "shuffle":
        acc, r = Fraction(1), n
        for k in ks:
            acc *= Fraction(math.perm(r, k), r ** k)
            r -= k
        return acc
    if task == "replace":
        acc, reach, r = Fraction(0), Fraction(1), n  # reach: probability that no w was drawn so far
        for k in ks:
            q = 1 - Fraction(1, r)
            acc += reach * k * Fraction(1, r) * q ** (k - 1)
            reach *= q ** k
            r -= k
        return acc
    b = checks.integer("items", items, 2)
    states = len(ks) * math.prod(k + 1 for k in ks)
    if states > MAX_DP_STATES:
        raise ValueError(f"counts: the domino accuracy's dynamic programme would visit {states:.3g} states for "
                         f"{len(ks)} rounds, more than {MAX_DP_STATES}; use fewer rounds or tokens")
    return _same_round_moment(tuple(ks), Fraction(1, b))


def _same_round_moment(ks: tuple[int, ...], q: Fraction) -> Fraction:
    """E[q^X] over uniformly random assignments of positions 1..n to rounds of sizes ks, X the number of adjacent
    positions in the same round (a DP over positions: the sizes still to fill and the previous round)."""
    n = sum(ks)

    @lru_cache(maxsize=None)
    def f(left: tuple[int, ...], prev: int) -> Fraction:
        if not any(left):
            return Fraction(1)
        total = Fraction(0)
        for j, c in enumerate(left):
            if c:
                total += (q if j == prev else 1) * f(left[:j] + (c - 1,) + left[j + 1:], j)
        return total

    ways = math.factorial(n)
    for k in ks:
        ways //= math.factorial(k)
    return f(ks, -1) / ways


class ListTask(ChainSource):
    """A ParallelBench-style list task as a world (module docstring); token ids decode as numbers.

    Args:
        task: ``copy``, ``replace``, ``shuffle`` or ``domino``.
        items: symbols (``domino``: digits, so items^2 tokens), >= 2.
        length: answer tokens n >= 1 (``data.seq_len`` must be n, or prompt + n with ``conditional: false``).
        prompt: the prompt's token ids (None: drawn with ``prompt_seed``).
        prompt_seed: seed of the drawn prompt.
        conditional: the answer law given the prompt (default) or the joint law of [prompt | answer].
    """

    def __init__(self, task: str = "shuffle", items: int = 6, length: int = 4, prompt: list[int] | None = None,
                 prompt_seed: int = 0, conditional: bool = True) -> None:
        self.task, self.items, self.length = task, items, length
        self.prompt, self.prompt_seed, self.conditional = prompt, prompt_seed, conditional
        checks.integer("prompt_seed", prompt_seed, 0)
        checks.boolean("conditional", conditional)
        check_task(task, items, length, conditional)
        if prompt is not None:
            check_prompt(task, prompt, items, length)

    def build(self, cache_dir: Path | None = None) -> SupportWorld:
        self._chain = task_world(self.task, self.items, self.length, self.prompt, self.prompt_seed, self.conditional)
        return self._chain
