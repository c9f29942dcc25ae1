"""Reading a user's YAML file: plain data only, and every failure in one line naming the file.

:func:`read_yaml` uses ``yaml.safe_load``: a tag such as ``!!python/object/apply:os.system`` is refused (it
would run code), with the line it is on, instead of PyYAML's 40-line report.  Imports only PyYAML, so the
command line checks its files before the heavy libraries load.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["read_yaml", "yaml_problem"]


def yaml_problem(exc: BaseException) -> str:
    """One line: what PyYAML found and where (``line 3: ... tag '!!python/object/apply:os.system'``)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    if "constructor for the tag" in str(problem):
        problem += " (only plain YAML data is read: a tag that builds Python objects could run code)"
    return f"{where}{problem}"


def read_yaml(path: str | Path, field: str) -> Any:
    """The data in the YAML file ``path``, or a one-line ValueError / FileNotFoundError naming ``field``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{field}: no such file {str(path)!r}")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{field}: cannot read {str(path)!r} ({type(exc).__name__}: {exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{field}: {str(path)!r} is not plain YAML ({yaml_problem(exc)})") from None
