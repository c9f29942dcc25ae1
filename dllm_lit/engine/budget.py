"""A run's memory and time, estimated at wiring from (N, T, V, rows, chunk), and refused when it cannot fit.

Memory (what a run holds however it samples):

* samples: every row's N x T tokens stay in memory until the run ends (the writer commits the growing
  ``samples.pt`` after each row), at the compact dtype (1 byte per token for V < 256), twice while a
  commit serialises them;
* a work item: ``chunk_size`` x T positions, each with a float32 posterior row over V tokens and its
  int64 / float64 draws (the oracle samplers' per-step state); the reference row of exact chain
  samples needs only the draws.

Time: at least rows x N x T tokens at 2.6 M tokens per CPU second (exact chain sampling, the fastest
row: 512 x 1024 tokens in 0.2 s on a 2-core CPU; samplers run 3-100x slower), reported with the
memory estimate.  The oracle's power table is left out: it is bounded by its own ``max_cache_bytes``
and, when cached, mapped from a shared file.

:func:`check_run_fits` raises one line naming the field to lower, the estimate and the machine's
memory, before any chain is built or file written.  :data:`MAX_STEP_VALUES` bounds a steps grid.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["RunEstimate", "estimate_run", "check_run_fits", "check_steps_count", "count_list_values",
           "machine_memory", "MAX_STEP_VALUES", "SETUP_SECONDS", "check_memory", "check_setup_time",
           "MAX_CONFIG_BYTES", "check_config_arguments"]

#: most values a sampler's steps grid may hold (each value is a full row of N sequences)
MAX_STEP_VALUES = 1000
#: CPU seconds a computation made before the first row (a schedule, an information curve, a world's tables) may be
#: expected to take: a shipped run's reference row of exact chain samples takes 0.2 s, and half a minute with no
#: output is where a user takes a run for hung.  Estimates use per-operation costs measured on a loaded 2-core CPU
SETUP_SECONDS = 30.0
#: the largest config file or command-line value read: a config holds settings (the shipped ones are at most 2 KB;
#: a full grid of MAX_STEP_VALUES step counts in block YAML is ~18 KB) and data belong in the files it names; 256 KiB
#: of YAML loads in ~0.1 s, where the parser's copies of a 13 MB million-entry list ran for minutes
MAX_CONFIG_BYTES = 256 * 1024
#: tokens per CPU second of the fastest row (exact chain samples; measured 512 x 1024 in 0.2 s)
TOKENS_PER_SECOND = 2.6e6
#: bytes per position of a work item besides its posterior row: int64 tokens, float64 uniforms, int64 indices
_DRAW_BYTES = 24
#: the settings of a shipped config (N, T, rows): which field is furthest beyond them is the one to lower
_TYPICAL = {"data.num_sequences": 512, "data.seq_len": 1024, "model.steps": 8}


@dataclass(frozen=True)
class RunEstimate:
    """Memory in bytes (samples and one work item) and a lower bound of the CPU time in seconds."""

    samples_bytes: int
    work_bytes: int
    seconds: float

    @property
    def bytes(self) -> int:
        return self.samples_bytes + self.work_bytes


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.0f} s"


def machine_memory() -> int | None:
    """Physical memory of this machine in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def estimate_run(num_sequences: int, seq_len: int, vocab_size: int, rows: int, chunk_size: int,
                 posterior_rows: bool = True) -> RunEstimate:
    """The estimate of the module docstring; ``posterior_rows`` False for a run of exact chain samples only."""
    itemsize = 1 if vocab_size < 256 else 2 if vocab_size < 2**15 else 4
    tokens = rows * num_sequences * seq_len
    item = min(chunk_size, num_sequences) * seq_len * (_DRAW_BYTES + (4 * vocab_size if posterior_rows else 0))
    return RunEstimate(2 * tokens * itemsize, item, tokens / TOKENS_PER_SECOND)


def check_run_fits(num_sequences: int, seq_len: int, vocab_size: int, rows: int, chunk_size: int,
                   posterior_rows: bool = True, memory: int | None = None) -> RunEstimate:
    """The estimate, or ValueError (one line) when it exceeds the machine's memory (``memory`` overrides it)."""
    est = estimate_run(num_sequences, seq_len, vocab_size, rows, chunk_size, posterior_rows)
    memory = machine_memory() if memory is None else memory
    if memory is None or est.bytes <= memory:
        return est
    if est.work_bytes > est.samples_bytes:
        field = "data.seq_len" if seq_len / _TYPICAL["data.seq_len"] >= chunk_size / 128 else "data.chunk_size"
    else:
        ratios = {"data.num_sequences": num_sequences, "data.seq_len": seq_len, "model.steps": rows}
        field = max(ratios, key=lambda k: ratios[k] / _TYPICAL[k])
    raise ValueError(
        f"{field} is too large for this machine: the run needs about {human_bytes(est.bytes)} of memory "
        f"({rows} rows x data.num_sequences={num_sequences} x data.seq_len={seq_len} tokens of samples: "
        f"{human_bytes(est.samples_bytes)}; a work item of data.chunk_size={min(chunk_size, num_sequences)} x "
        f"{seq_len} positions{f' over V={vocab_size} tokens' if posterior_rows else ''}: "
        f"{human_bytes(est.work_bytes)}) and at least "
        f"{human_seconds(est.seconds)} of CPU, but this machine has {human_bytes(memory)}: lower {field}")


def check_memory(field: str, value: object, need: float, what: str, memory: int | None = None) -> None:
    """One-line ValueError naming ``field`` when ``what`` needs more than this machine's memory (``memory``
    overrides it), before anything is allocated."""
    memory = machine_memory() if memory is None else memory
    if memory is not None and need > memory:
        raise ValueError(f"{field}={value} is too large: {what} would need about {human_bytes(need)} of memory, but "
                         f"this machine has {human_bytes(memory)}; lower {field}")


def check_setup_time(field: str, value: object, seconds: float, what: str) -> None:
    """One-line ValueError naming ``field`` when ``what`` is estimated to take more than :data:`SETUP_SECONDS`."""
    if seconds > SETUP_SECONDS:
        raise ValueError(f"{field}={value} is too large: {what} would take about {human_seconds(seconds)} of CPU "
                         f"before anything is sampled (at most {SETUP_SECONDS:.0f} s); lower {field.split('=')[0]}")


def check_steps_count(name: str, count: int) -> None:
    """A steps grid of at most :data:`MAX_STEP_VALUES` values (each is a full row of the run)."""
    if count > MAX_STEP_VALUES:
        raise ValueError(f"{name} must list at most {MAX_STEP_VALUES} step counts (each is a row of N sequences), "
                         f"got {count}")


def count_list_values(text: str) -> int:
    """Entries of a command-line list such as ``[8, 16, 32]`` (commas + 1; 1 for a scalar), without parsing it."""
    text = text.strip()
    if not text.startswith("["):
        return 1
    inner = text.strip("[] \t\n")
    return inner.count(",") + 1 if inner else 0


def _steps_lists(tree: object, path: str = "") -> Iterator[tuple[str, int]]:
    """(dotted key, length) of every list stored under a key named ``steps`` in a loaded YAML tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            here = f"{path}.{key}" if path else str(key)
            if key == "steps" and isinstance(value, list):
                yield here, len(value)
            yield from _steps_lists(value, here)
    elif isinstance(tree, list):
        for item in tree:
            yield from _steps_lists(item, path)


def _check_yaml_steps(name: str, text: str) -> None:
    import yaml

    try:
        tree = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return  # the parser reports it
    for key, count in _steps_lists(tree):
        check_steps_count(f"{key} in {name}", count)


def check_config_arguments(args: Sequence[str]) -> None:
    """Before the config parser sees them (one line naming the option or file): every command-line value and
    every file an option names at most :data:`MAX_CONFIG_BYTES`, and every steps list, given as ``--model.steps``
    or under a ``steps`` key of a config file or inline YAML (flow or block style), at most
    :data:`MAX_STEP_VALUES` values."""
    for i, arg in enumerate(args):
        key, eq, value = str(arg).partition("=")
        if not key.startswith("--"):
            continue
        value = value if eq else (str(args[i + 1]) if i + 1 < len(args) else "")
        if key in ("--model.steps", "--model.init_args.steps"):
            check_steps_count(key.lstrip("-"), count_list_values(value))
        _check_size(f"the value of {key}", len(value))
        if os.path.isfile(value):
            size = os.path.getsize(value)
            if size > MAX_CONFIG_BYTES:
                with open(value, errors="replace") as fh:  # a flow-style steps list is named before the size
                    for found in re.finditer(r"\bsteps:\s*(\[[^\]]*\])", fh.read()):
                        check_steps_count(f"steps in {value}", count_list_values(found.group(1)))
                _check_size(f"{key} {value}", size)
            if value.endswith((".yaml", ".yml", ".json")) or key == "--config":
                with open(value, errors="replace") as fh:
                    _check_yaml_steps(value, fh.read())
        elif value.lstrip().startswith("{"):
            _check_yaml_steps(f"the value of {key}", value)


def _check_size(name: str, size: int) -> None:
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"{name} must be at most {MAX_CONFIG_BYTES // 1024} KiB (a config holds settings; data "
                         f"belong in the files it names), got {human_bytes(size)}")
