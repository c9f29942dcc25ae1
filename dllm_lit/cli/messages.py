"""One-line messages for command-line errors.

jsonargparse reports a bad option as a nested tree (every Union alternative, the Namespace that
was given, ...), often 30-80 lines.  :func:`condense_parser_error` turns that tree into one line
that names the field (``model.steps``, ``data.source.init_args.path``) and what is allowed.
"""
from __future__ import annotations

import importlib
import inspect
import re

__all__ = ["condense_parser_error", "missing_module_hint", "one_line"]

_TYPE_WORDS = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string",
               "list": "a list", "dict": "a mapping"}
_SKIP_PREFIXES = ("Does not validate against", "Subtypes:", "Errors:", "Given value type:", "Expected a path but",
                  "Expected a <class 'NoneType'>", "Not a valid subclass", "Import path")


def one_line(exc: BaseException) -> str:
    """An error's message as the one line the command line prints: its first non-empty line (or its type)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _options_of(class_path: str | None) -> list[str]:
    """Constructor options of ``class_path`` (empty when it cannot be imported)."""
    if not class_path:
        return []
    try:
        module, name = class_path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]
    except Exception:  # noqa: BLE001 - best effort: the message stays useful without the list
        return []


def _classes_in(class_path: str) -> list[str]:
    """The classes a config can name in the module part of ``class_path``: exported classes that are not
    functions, exceptions or abstract (``Sampler``, ``top_p_filter`` are not; ``LLaDA``, a base of ``PCSampler``,
    is)."""
    try:
        module = importlib.import_module(class_path.rsplit(".", 1)[0])
    except Exception:  # noqa: BLE001
        return []
    exported = {n: getattr(module, n, None) for n in getattr(module, "__all__", [])}
    classes = {n: c for n, c in exported.items()
               if inspect.isclass(c) and not issubclass(c, BaseException) and not inspect.isabstract(c)}
    return sorted(classes)


def missing_module_hint(message: str) -> str:
    """For "No module named 'x'" (a user's own module that is not importable): where Python looks, and how to
    put it there; '' for any other message."""
    m = re.search(r"No module named '([^'.]+)", message)
    if not m:
        return ""
    return (f" - Python did not find {m.group(1)}.py on its module path: run from the folder that holds it with "
            f"PYTHONPATH=. (or PYTHONPATH=<that folder>), or pip install -e your package")


def condense_parser_error(message: str) -> str:
    """The field and the problem of a jsonargparse error message, in one line."""
    keys: list[str] = []
    class_path: str | None = None
    given: str | None = None
    details: list[str] = []
    not_subclass: tuple[str, str] | None = None
    for raw in message.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"(?:- )?Import path (\S+) does not correspond to a subclass of (\w+)", line)
        if m:
            not_subclass = not_subclass or (m.group(1), m.group(2))
            continue
        m = re.match(r'(?:- )?Parser key "([^"]+)":?$', line)
        if m:
            keys.append(m.group(1))
            continue
        m = re.match(r"- Problem with given class_path '([^']+)':", line)
        if m:
            class_path = m.group(1)
            continue
        if line.startswith("Given value:"):
            given = given or line.split(":", 1)[1].strip()
            continue
        if line.lstrip("- ").startswith(_SKIP_PREFIXES):
            continue
        details.append(line.lstrip("- ").strip())
    field = ".".join(keys) if keys else None
    where = f"{field}: " if field else ""
    shown = given if given is not None and not given.startswith(("NestedArg", "Namespace", "{")) else None
    if not_subclass is not None:  # a class_path naming a function or another library's class
        return (f"{field + '.class_path' if field else 'class_path'}: {not_subclass[0]!r} is not a {not_subclass[1]} "
                "subclass; only the classes this entry point documents are accepted (a config never runs other "
                "code), nothing was run")

    for d in details:
        m = re.match(r"Option '([^']+)' is not accepted", d)
        if m:
            accepted = _options_of(class_path)
            extra = f" (accepted: {', '.join(accepted)})" if accepted else ""
            return f"{where}unknown option '{m.group(1)}' for {class_path or 'this class'}{extra}"
        m = re.match(r"module '([^']+)' has no attribute '([^']+)'", d)
        if m:
            names = _classes_in(f"{m.group(1)}.{m.group(2)}")
            extra = f" (available: {', '.join(names)})" if names else ""
            return f"{where}no class {m.group(2)!r} in {m.group(1)}{extra}"
        m = re.match(r"the following arguments are required: (.+)", d)
        if m:
            return f"{where}missing required option {m.group(1)}" + (f" for {class_path}" if class_path else "")
        m = re.match(r"Expected a <class '(\w+)'>\. Got value: (.*)", d)
        if m:
            what = _TYPE_WORDS.get(m.group(1), m.group(1))
            return f"{field or 'value'} must be {what}, got {m.group(2)}"
    expected = [re.match(r"Expected a <class '(\w+)'>", d) for d in details]
    kinds = [_TYPE_WORDS.get(m.group(1), m.group(1)) for m in expected if m]
    if kinds:
        return f"{field or 'value'} must be {' or '.join(dict.fromkeys(kinds))}" + (f", got {shown!r}" if shown else "")
    text = "; ".join(details[:2]) if details else message.strip().splitlines()[0]
    return f"{where}{text}{missing_module_hint(text)}"
