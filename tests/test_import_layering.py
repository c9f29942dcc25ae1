"""Imports go one way: no cycle among dllm_lit's modules, and the rules and the oracle import without Lightning.

The import graph is read from the source (AST), not by importing:

- an ``import`` / ``from ... import`` at module level (also inside ``if`` / ``try``, not under
  ``if TYPE_CHECKING:``) is an edge to the named module and to every package above it that is not above
  the importing module too (Python runs those packages' ``__init__`` first: a package that re-exports a
  high-level module makes every importer of its low-level modules depend on it);
- an import inside a function runs later, when every module is loaded (an optional compiled kernel, a heavy
  library); it still must not close a cycle: there is no exception list.

The decoding engine (``dllm_lit.decoding``) is private: a sampler module imports only the entry points its
package ``__all__`` lists (documented in its docstring), never one of its modules, and the engine imports no sampler.

Lightning is imported only by the LightningModule wrappers (samplers, training), the data module, the
results writer and the CLI; a subprocess checks that the denoisers, the oracle, ``dllm_lit.samplers``,
every sampler module that is not a LightningModule, the run plan and the metrics registry import without it.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dllm_lit"

def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(modules: dict[str, Path], name: str, in_functions: bool) -> list[str]:
    """Modules named by ``name``'s imports (module level; with ``in_functions`` also those inside functions)."""
    path = modules[name]
    is_package = path.name == "__init__.py"

    def walk(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []),
                              *[h.body for h in getattr(node, "handlers", [])]):
                    yield from walk(block)
            elif in_functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from walk(node.body)

    targets = []
    for node in walk(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
            continue
        base = node.module or ""
        if node.level:  # relative import
            here = name.split(".") if is_package else name.split(".")[:-1]
            base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
        targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    return targets


def _graph(in_functions: bool) -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name in modules:
        above = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges = set()
        for target in _imports(modules, name, in_functions):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                module = ".".join(parts[:i])
                if module in modules and module != name and module not in above:
                    edges.add(module)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_at_module_level() -> None:
    assert _cycles(_graph(in_functions=False)) == []


def test_imports_inside_functions_close_no_cycle() -> None:
    """Not even a lazy one (the rule and its providers, the HMM world and its exact laws, the first-order oracle
    and its kernel each import one way)."""
    assert [sorted(c) for c in _cycles(_graph(in_functions=True))] == []


def test_the_plan_imports_no_sampler_and_the_experiments_no_cli() -> None:
    """The reference sampler is supplied by the wiring step; grid points run the predict CLI, not the dispatcher;
    below the command line, nothing imports its top floor (the dispatcher, the LightningCLI, the wiring step)."""
    graph = _graph(in_functions=True)
    assert not any(m.startswith("dllm_lit.samplers") for m in graph["dllm_lit.engine.plan"])
    top = {"dllm_lit.cli.dispatch", "dllm_lit.cli.lightning_cli", "dllm_lit.cli.wiring"}
    for name, edges in graph.items():
        if name.startswith(("dllm_lit.experiments", "dllm_lit.engine")):
            assert "dllm_lit.cli.dispatch" not in edges, name
        if not name.startswith(("dllm_lit.experiments", "dllm_lit.cli")):
            assert not edges & top, name


def test_the_engine_is_the_low_floor() -> None:
    """``dllm_lit.engine`` (plan, budget, process group, threads) sits below the denoisers and the samplers: none of
    its modules imports a model, a sampler, the decoding engine, an experiment or the command line."""
    above = ("dllm_lit.denoisers", "dllm_lit.samplers", "dllm_lit.decoding", "dllm_lit.experiments", "dllm_lit.cli")
    graph = _graph(in_functions=True)
    for name, edges in graph.items():
        if name.startswith("dllm_lit.engine"):
            assert sorted(e for e in edges if e.startswith(above)) == [], name


def test_the_utilities_import_nothing_above_them() -> None:
    """``dllm_lit.util`` is the bottom floor: its modules import no other part of dllm_lit."""
    graph = _graph(in_functions=True)
    for name, edges in graph.items():
        if name.startswith("dllm_lit.util"):
            assert {e for e in edges if not e.startswith("dllm_lit.util")} == set(), name


def _decoding_entry_points() -> tuple[set[str], str]:
    """``dllm_lit.decoding.__all__`` and the package docstring, read from its source."""
    tree = ast.parse((PACKAGE / "decoding" / "__init__.py").read_text())
    names = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets))
    return set(names), ast.get_docstring(tree) or ""


def test_the_engine_entry_points_are_documented_and_exist() -> None:
    import dllm_lit.decoding as decoding

    names, doc = _decoding_entry_points()
    assert sorted(n for n in names if f"`{n}`" not in doc) == []
    assert sorted(n for n in names if not hasattr(decoding, n)) == []


def test_samplers_import_only_the_engine_entry_points() -> None:
    """An algorithm module (everything in ``dllm_lit/samplers/``) imports from ``dllm_lit.decoding`` only the names
    of its ``__all__``, from the package itself: never a module of the engine, not even inside a function."""
    names, _ = _decoding_entry_points()
    found = []
    for path in sorted((PACKAGE / "samplers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path.name, a.name) for a in node.names if a.name.startswith("dllm_lit.decoding")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dllm_lit.decoding"):
                if node.module != "dllm_lit.decoding":
                    found.append((path.name, node.module))
                found += [(path.name, a.name) for a in node.names if a.name not in names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                found.append((path.name, "relative import"))
    assert found == []


def test_the_engine_imports_no_sampler() -> None:
    """Nothing in ``dllm_lit.decoding`` reaches a sampler class (``samplers.base``, hence the rule and the algorithm
    modules), even through an import inside a function: the engine sits below the samplers."""
    graph = _graph(in_functions=True)
    for name in graph:
        if name.startswith("dllm_lit.decoding"):
            seen, todo = set(), [name]
            while todo:
                v = todo.pop()
                if v not in seen:
                    seen.add(v)
                    todo.extend(graph.get(v, ()))
            assert "dllm_lit.samplers.base" not in seen, name


def _light_modules() -> list[str]:
    """The denoisers, the oracle, the plan, the metrics registry and the sampler modules that define no LightningModule."""
    modules = _modules()
    graph = _graph(in_functions=False)
    light = ["dllm_lit.denoisers", "dllm_lit.denoisers.oracle", "dllm_lit.denoisers.hmm_oracle", "dllm_lit.samplers",
             "dllm_lit.decoding",
             "dllm_lit.engine", "dllm_lit.engine.plan", "dllm_lit.exact", "dllm_lit.markov", "dllm_lit.results",
             "dllm_lit.results.registry", "dllm_lit.results.files"]
    def reaches_base(name: str) -> bool:
        seen, todo = set(), [name]
        while todo:
            v = todo.pop()
            if v == "dllm_lit.samplers.base":
                return True
            if v not in seen:
                seen.add(v)
                todo.extend(graph.get(v, ()))
        return False

    for name in sorted(modules):
        if name.startswith("dllm_lit.samplers.") and not reaches_base(name) and "lightning" not in modules[name].read_text():
            light.append(name)
    return light


def test_rules_and_the_oracle_import_without_lightning() -> None:
    light = _light_modules()
    assert "dllm_lit.samplers.draws" in light and "dllm_lit.samplers.llada" not in light
    code = ("import importlib, json, sys\n"
            f"for name in {light!r}:\n"
            "    importlib.import_module(name)\n"
            "    heavy = sorted(m for m in ('lightning', 'lightning.pytorch', 'pytorch_lightning') if m in sys.modules)\n"
            "    if heavy:\n"
            "        print(json.dumps([name, heavy])); break\n"
            "else:\n"
            "    print(json.dumps(None))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) is None, f"imports Lightning: {out.stdout}"


def test_sampler_classes_load_on_first_use() -> None:
    """``dllm_lit.samplers`` exports every sampler lazily: each name resolves to its module's class."""
    import importlib

    import dllm_lit.samplers as samplers

    for name in samplers.__all__:
        path = samplers._EXPORTS[name]
        module = importlib.import_module(path if "." in path else f"dllm_lit.samplers.{path}")
        assert getattr(samplers, name) is getattr(module, name)
    assert set(samplers.__all__) == set(samplers._EXPORTS)


#: the most parameters a function of the decoding engine takes (issue 35: options travel as one frozen dataclass
#: built once, e.g. ``BlockDecoding``, ``CachedFeatures``, ``ScoringRounds``)
MAX_ENGINE_PARAMETERS = 8
#: engine functions allowed more, each with its reason
ENGINE_PARAMETER_EXEMPTIONS = {
    # numba-compiled kernels: their arrays and scalars are their parameters (a compiled function takes no Python
    # object to bundle them), and they are called from one Python wrapper each
    "dllm_lit/decoding/nucleus_kernel.py:_cut",
    "dllm_lit/decoding/nucleus_kernel.py:filter_strict_rows",
    "dllm_lit/decoding/p2_kernel.py:plan_step",
}


def _engine_parameter_counts() -> dict[str, int]:
    """``path:function`` -> its positional and keyword-only parameters besides ``self`` / ``cls`` (``*args`` and
    ``**kwargs`` excluded), for every function and method of ``dllm_lit/decoding/``."""
    out: dict[str, int] = {}
    for path in sorted((PACKAGE / "decoding").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = sum(x.arg not in ("self", "cls") for x in a.posonlyargs + a.args + a.kwonlyargs)
                name = f"{path.relative_to(ROOT).as_posix()}:{node.name}"
                out[name] = max(n, out.get(name, 0))
    return out


def test_no_engine_function_takes_more_than_eight_parameters() -> None:
    """No function of the decoding engine takes more than :data:`MAX_ENGINE_PARAMETERS` parameters, but the
    listed compiled kernels; every exemption still names a function that needs it."""
    counts = _engine_parameter_counts()
    over = {name: n for name, n in counts.items() if n > MAX_ENGINE_PARAMETERS}
    assert sorted(set(over) - ENGINE_PARAMETER_EXEMPTIONS) == []
    assert sorted(ENGINE_PARAMETER_EXEMPTIONS - set(over)) == []
