"""Argument checks shared by every constructor: one clear ``ValueError`` that names the field.

Every public option of dllm_lit (sampler, data module, chain source, metric, results writer) is
validated once, when its object is built, with these helpers.  The message always has the form
``"<field> must be <what is allowed>, got <value>"`` so the CLI can print it as one line.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "integer", "optional_integer", "real", "optional_real", "choice", "integer_list", "probability",
    "boolean", "nonempty_str", "optional_mapping",
]

T = TypeVar("T")


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)


def integer(name: str, v: Any, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``v`` as an int in [minimum, maximum] (bools and floats are refused)."""
    ok = _is_int(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum)
    if not ok:
        if minimum == 1 and maximum is None:
            what = "a positive integer"
        elif minimum == 0 and maximum is None:
            what = "an integer >= 0"
        elif maximum is None:
            what = f"an integer >= {minimum}"
        elif minimum is None:
            what = f"an integer <= {maximum}"
        else:
            what = f"an integer in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return int(v)


def optional_integer(name: str, v: Any, minimum: int | None = 1, maximum: int | None = None) -> int | None:
    """:func:`integer`, or None."""
    return None if v is None else integer(name, v, minimum, maximum)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is None and high is None:
        return "a finite number"
    if high is None:
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def real(name: str, v: Any, low: float | None = None, high: float | None = None,
         low_open: bool = False, high_open: bool = False) -> float:
    """``v`` as a finite float inside the interval given by ``low`` / ``high`` (open ends optional)."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    if ok:
        v = float(v)
        if low is not None and (v <= low if low_open else v < low):
            ok = False
        if high is not None and (v >= high if high_open else v > high):
            ok = False
    if not ok:
        raise ValueError(f"{name} must be {_interval(low, high, low_open, high_open)}, got {v!r}")
    return float(v)


def optional_real(name: str, v: Any, low: float | None = None, high: float | None = None,
                  low_open: bool = False, high_open: bool = False) -> float | None:
    """:func:`real`, or None."""
    return None if v is None else real(name, v, low, high, low_open, high_open)


def probability(name: str, v: Any, allow_zero: bool = False) -> float:
    """A probability in (0, 1] (or [0, 1] with ``allow_zero``)."""
    return real(name, v, 0.0, 1.0, low_open=not allow_zero)


def choice(name: str, v: T, allowed: Iterable[T]) -> T:
    """``v`` if it is one of ``allowed``."""
    allowed = tuple(allowed)
    if v not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {shown}, got {v!r}")
    return v


def integer_list(name: str, v: Any, minimum: int | None = 1, unique: bool = True) -> list[int]:
    """An int or a non-empty list of ints (each >= ``minimum``), as a list; duplicates refused if ``unique``."""
    values = [v] if _is_int(v) else v
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{name} must be an integer or a non-empty list of integers, got {v!r}")
    out = [integer(f"{name}[{i}]" if not _is_int(v) else name, x, minimum) for i, x in enumerate(values)]
    if unique and len(set(out)) != len(out):
        dup = sorted({x for x in out if out.count(x) > 1})
        raise ValueError(f"{name} must not repeat a value, got {out!r} (repeated: {dup})")
    return out


def boolean(name: str, v: Any) -> bool:
    """``v`` if it is a bool."""
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false, got {v!r}")
    return v


def nonempty_str(name: str, v: Any) -> str:
    """``v`` if it is a non-empty string."""
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{name} must be a non-empty string, got {v!r}")
    return v


def optional_mapping(name: str, v: Any) -> dict:
    """A copy of ``v`` if it is a mapping with string keys; ``{}`` for None."""
    if v is None:
        return {}
    if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
        raise ValueError(f"{name} must be a mapping of option names to values, got {v!r}")
    return dict(v)


def divides(name: str, block: int | None, seq_len: int) -> None:
    """One-line error unless ``block`` (None: one block of the whole sequence) divides ``seq_len``."""
    if block is not None and seq_len % block:
        raise ValueError(f"{name}={block} must divide seq_len={seq_len}")
