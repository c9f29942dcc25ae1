"""docs/architecture.md's "add one" recipes, run as written: each recipe's fenced python blocks are modules of a
package ``my_pkg`` (named in each block's first comment line), written under ``tmp_path`` and used as the doc says.
A recipe that drifts from the code fails here."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("single_thread")

DOC = ROOT / "docs" / "architecture.md"
SECTIONS = {"sampler": "## Adding a sampler", "source": "## Adding a chain source", "metric": "## Adding a metric"}


def recipe_modules(section: str) -> dict[str, str]:
    """``{relative path: source}`` of the section's python blocks whose first line is ``# my_pkg/<name>.py``."""
    text = DOC.read_text()
    start = text.index(SECTIONS[section])
    end = text.find("\n## ", start + 1)
    modules = {}
    for block in re.findall(r"```python\n(.*?)```", text[start:end if end != -1 else None], re.S):
        first, _, rest = block.partition("\n")
        named = re.fullmatch(r"# (my_pkg/\w+\.py)", first.strip())
        if named:
            modules[named.group(1)] = rest
    return modules


@pytest.fixture(scope="module")
def my_pkg(tmp_path_factory) -> Path:
    """Every recipe's modules written as the package ``my_pkg``, importable in this process and its children."""
    root = tmp_path_factory.mktemp("recipes")
    (root / "my_pkg").mkdir()
    (root / "my_pkg" / "__init__.py").write_text("")
    for section in SECTIONS:
        modules = recipe_modules(section)
        assert modules, f"the {section} recipe has no block named '# my_pkg/<module>.py'"
        for rel, source in modules.items():
            (root / rel).write_text(source)
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        del sys.modules[name]


@pytest.fixture
def token_rate(my_pkg):
    """The metric recipe's module, registered (its import runs ``register``) for one test."""
    import importlib

    from dllm_lit.results import registry

    import my_pkg.token_rate as recipe
    if recipe.SPEC not in registry.METRICS:  # imported by an earlier test, whose teardown removed the spec
        recipe = importlib.reload(recipe)
    yield recipe
    registry.METRICS.remove(recipe.SPEC)


def test_recipes_run_through_cli_predict(token_rate, tmp_path) -> None:
    """``python cli.py predict`` calls ``dllm_lit.cli.main`` with its arguments; called here in-process (a child
    process would spend ~7 CPU s importing Lightning again; the run itself costs well under a second)."""
    from dllm_lit.cli import main

    main(["predict", "--model", "my_pkg.margin.Margin", "--model.steps", "[2, 8]",
          "--data.source", "my_pkg.ring.Ring", "--data.source.vocab_size", "8",
          "--data.num_sequences", "8", "--data.seq_len", "8", "--trainer.default_root_dir", str(tmp_path),
          "--trainer.enable_progress_bar", "false", "--results.figures", "false",
          "--results.metric_options", "{rate_token: 0}"])
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert [(r["sampler"], r["steps"]) for r in rows] == [("ar", None), ("margin", 2), ("margin", 8)]
    assert all(r["kl"] is not None and r["kl"] >= 0 for r in rows)
    assert all(0 <= r["token_rate"] <= 1 for r in rows)


def test_source_recipe_builds_decodes_and_describes(my_pkg) -> None:
    from my_pkg.ring import Ring

    source = Ring(vocab_size=5, eps=0.5)
    chain = source.build()
    expected = torch.full((5, 5), 0.1, dtype=torch.float64) + 0.5 * torch.eye(5, dtype=torch.float64).roll(1, 1)
    assert torch.allclose(chain.kernel, expected, rtol=0, atol=1e-15)
    assert source.decoder().vocab_size == 5
    assert source.decoder().decode_batch(torch.tensor([[0, 4]])) == ["0 4"]
    assert source.describe()["init_args"] == {"vocab_size": 5, "eps": 0.5}


def test_metric_recipe_registers_and_is_enabled_by_its_option(token_rate) -> None:
    from dllm_lit.results import registry
    from dllm_lit.results.writer import ResultsWriter

    recipe = token_rate
    assert "token_rate" not in [k for s in registry.enabled_specs(ResultsWriter()) for k in s.keys]
    writer = ResultsWriter(metric_options={"rate_token": 0})
    spec = next(s for s in registry.enabled_specs(writer) if s.keys == ("token_rate",))
    assert spec is recipe.SPEC and writer.metric_identity()["rate_token"] == 0
    assert spec in registry.enabled_specs(ResultsWriter(**spec.switch_on))  # what the identity tests read
    with pytest.raises(ValueError, match=r"^metric key 'token_rate' is already registered; choose another name$"):
        registry.register(recipe.SPEC)
    metric = recipe.TokenRate(0)
    metric.update(torch.tensor([[0, 1, 0], [2, 0, 0]]))
    metric.update(torch.tensor([[1, 1, 1]]))
    assert metric.compute().item() == 4 / 9


def test_no_algorithm_module_tests_the_denoisers_type() -> None:
    """The doc's claim: only ``base`` (is it a denoiser, is it the chain's own oracle) and the shared maths
    (``draws``: a local denoiser's neighbour queries; ``reference_scoring``: the oracle's exact scores) do."""
    import ast

    allowed = {"base.py", "draws.py", "reference_scoring.py"}
    found = [f"{f.name}:{n.lineno}" for f in sorted((ROOT / "dllm_lit" / "samplers").glob("*.py")) if f.name not in allowed
             for n in ast.walk(ast.parse(f.read_text()))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "isinstance" and len(n.args) == 2
             and "Denoiser" in ast.unparse(n.args[1])]
    assert found == []
