"""Every command README.md prints runs as printed (issue 19, item 10).

The commands are read from README.md itself (code blocks and inline code), so a command added or edited
there is tested or the classification below fails.  Each is run in a scratch folder holding the repo's
``configs/`` and ``sweeps/`` and the files the README assumes (``book.txt``, ``gt.pt``, a trained
``outputs/denoiser``):

* ``run``: the whole command (cheap as printed);
* ``wire``: parsed, instantiated and wired (:func:`dllm_lit.engine.connect`) exactly as printed - every check
  that can refuse the run has run - but not sampled (minutes as printed);
* ``parse``: parsed and instantiated only, where wiring needs the network or a minutes-long table build;
* ``small``: the printed command plus size overrides (its own run as printed takes minutes);
* ``script``: a Python script, compiled (its run is a slow test).

A README command that needs a placeholder filled in (``<name>``) or is not this package's (``wandb``,
``pytest``, benchmark scripts, which ``tests/test_benchmarks_smoke.py`` covers) is listed in ``SKIPPED``.
"""
from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import torch

from dllm_lit.cli import DllmCLI, main
from dllm_lit.cli.wiring import connect, connect_training
from dllm_lit.results.writer import ResultsWriter

REPO = Path(__file__).resolve().parents[1]

#: (substring of the command, how it is tested, extra arguments for ``small``)
CASES: list[tuple[str, str, list[str]]] = [
    ("--model.steps '[8, 64]' --data.num_sequences 128", "run", []),
    ("predict --config configs/remdm_conf.yaml", "wire", []),
    ("--config configs/data/english.yaml", "wire", []),
    ("--config configs/data/synthetic.yaml", "parse", []),  # wiring builds the V = 4096 power table (~30 s CPU)
    ("--config configs/data/local_text.yaml", "wire", []),
    ("--config configs/data/text8.yaml", "parse", []),  # network
    ("--config configs/data/openwebtext.yaml", "parse", []),  # network
    ("--config configs/data/paper_artifact.yaml", "wire", []),
    ("--results.genppl_model gpt2-large", "wire", []),  # the LMs load when sampling starts (network)
    ("fit --config configs/train_denoiser.yaml", "wire", []),
    ("CheckpointDenoiser", "wire", []),
    ("decompose --config configs/decompose.yaml", "small",
     ["--data.num_sequences", "8", "--data.seq_len", "16", "--denoiser_sequences", "8", "--bootstrap_resamples", "10",
      "--sampler.init_args.steps", "[4]"]),
    ("decompose --config configs/cache_study.yaml", "small",
     ["--data.num_sequences", "8", "--data.seq_len", "16", "--denoiser_sequences", "8", "--bootstrap_resamples", "10",
      "--law_permutations", "9", "--sampler.init_args.steps", "[4]", "--sampler.init_args.block_length", "8",
      "--sampler.init_args.denoiser.init_args.path", "outputs/denoiser/checkpoints/last.ckpt"]),
    ("dllm_lit.experiments.conditional --help", "module", []),
    ("sweep sweeps/", "small", ["--dry-run"]),
    ("python cli.py --help", "run", []),
    ("python cli.py conform --help", "run", []),
    ("report outputs/sweeps/paper_grid --out reports/paper_grid", "run", []),  # on the tiny run the scratch folder holds
    ("python examples/diffusers_llada2.py", "script", []),  # compiled here; run by tests/test_examples_documented.py (slow)
    ("--config examples/llada_external.yaml", "wire", []),
    ("conform --sampler examples/llada_conform.yaml", "small", ["--samples", "2000"]),
    ("--config configs/data/kth_order.yaml", "wire", []),
    ("--config configs/data/switching_chains.yaml", "wire", []),
    ("--config configs/data/hmm_synthetic.yaml", "wire", []),
]

SKIPPED = ("<", "wandb ", "pytest", "benchmarks/",
           "dllm_lit.experiments.world_sweep")  # reads a finished sweep's folder (tests/test_world_sweep.py runs it)


def readme_commands() -> list[str]:
    """Every ``python cli.py ...`` / ``python -m dllm_lit...`` command README.md prints, continuation lines joined."""
    text = (REPO / "README.md").read_text()
    found: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("python "):
                found.append(" ".join(line.split()))
    found += [" ".join(c.split()) for c in re.findall(r"`(python [^`]+)`", text)]
    return list(dict.fromkeys(found))


def _case(command: str) -> tuple[str, list[str]] | None:
    if any(s in command for s in SKIPPED) or "pytest" in command:
        return None
    hits = [(mode, extra) for key, mode, extra in CASES if key in command]
    assert hits, f"README command not covered by tests/test_readme_commands.py: {command}"
    return hits[0]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A working folder with configs/, sweeps/, book.txt, gt.pt and a small trained denoiser (T = 128)."""
    from dllm_lit.markov import synthetic_chain

    root = tmp_path_factory.mktemp("readme")
    for name in ("configs", "sweeps", "examples"):
        (root / name).symlink_to(REPO / name)
    (root / "book.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    main(["predict", "--config", str(REPO / "configs/mdlm.yaml"), "--model.steps", "[2]", "--data.num_sequences", "4",
          "--data.seq_len", "8", "--results.figures", "false", "--trainer.enable_progress_bar", "false",
          "--trainer.default_root_dir", str(root / "outputs/sweeps/paper_grid/mdlm-steps2")])  # a run to report on
    ch = synthetic_chain(30, 5, eps=1e-4, seed=4)
    torch.save({"nbr_idx": ch.nbr_idx, "nbr_prob": ch.nbr_prob.float(), "nu": ch.nu.float(), "eps": 1e-4,
                "pi": ch.stationary.float()}, root / "gt.pt")
    main(["fit", "--config", str(REPO / "configs/train_denoiser.yaml"), "--trainer.max_steps", "2",
          "--trainer.val_check_interval", "2", "--trainer.max_time", "null", "--data.batch_size", "2",
          "--data.val_sequences", "2", "--model.hidden_size", "16", "--model.num_layers", "1",
          "--model.intermediate_size", "32", "--trainer.enable_progress_bar", "false",
          "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(root / "outputs/denoiser")])
    return root


def _argv(command: str) -> list[str]:
    argv = shlex.split(command)
    assert argv[:2] in (["python", "cli.py"], ["python", "-m"]), command
    return argv[2:] if argv[1] == "cli.py" else ["decompose"] + argv[3:]


def _wire(argv: list[str], instantiate_only: bool) -> None:
    verb, args = argv[0], argv[1:]
    cli = DllmCLI(args=args, run=False)
    if instantiate_only:
        return
    if verb == "fit":
        connect_training(cli.model, cli.datamodule)
        return
    writer = next(cb for cb in cli.trainer.callbacks if isinstance(cb, ResultsWriter))
    connect(cli.model, cli.datamodule, writer, reference=bool(cli.config["plan"]["reference"]))


COMMANDS = readme_commands()


def test_readme_has_commands() -> None:
    assert len(COMMANDS) >= 20 and all(c.startswith("python ") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_as_printed(command: str, scratch: Path, monkeypatch) -> None:
    case = _case(command)
    if case is None:
        pytest.skip("a placeholder to fill in, or not a command of this package")
    mode, extra = case
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("sys.argv", ["cli.py"])  # LightningCLI warns when pytest's own arguments are present
    if mode == "script":
        path = REPO / shlex.split(command)[1]
        compile(path.read_text(), str(path), "exec")
        return
    if mode == "module":  # python -m <module> <args>: the module's own main
        argv = shlex.split(command)
        module = importlib.import_module(argv[2])
        try:
            code = module.main(argv[3:])
        except SystemExit as exc:  # argparse's --help
            code = exc.code
        assert code in (0, None), command
        return
    argv = _argv(command)
    if mode in ("wire", "parse"):
        _wire(argv, instantiate_only=mode == "parse")
    else:
        code = 0
        try:
            main(argv + extra)
        except SystemExit as exc:  # sweep / report / decompose return an exit status
            code = exc.code
        assert code in (0, None), command


def test_old_swap_command_is_refused_before_touching_outputs(scratch: Path, monkeypatch, capsys) -> None:
    """T = 1024 with a denoiser that reads 128 positions: one line at wiring, the previous results untouched."""
    monkeypatch.chdir(scratch)
    out = scratch / "outputs/mdlm_old"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text("previous results")
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--config", "configs/mdlm.yaml", "--model.denoiser", "dllm_lit.denoisers.CheckpointDenoiser",
              "--model.denoiser.init_args.path", "outputs/denoiser/checkpoints/last.ckpt",
              "--trainer.default_root_dir", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reads at most 128 positions" in err[0] and "data.seq_len=1024" in err[0]
    assert (out / "metrics.json").read_text() == "previous results"
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]


#: what ``pip install -e`` adds: a finder after the path finder that maps dllm_lit.* to this checkout
EDITABLE_FINDER = """
import importlib.machinery, sys
from pathlib import Path
REPO = Path({repo!r})
class Editable:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.split(".")[0] != "dllm_lit":
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(REPO.joinpath(*fullname.split(".")[:-1]))])
sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder) + 1, Editable)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
"""


def test_bundled_data_is_read_without_importlib_resources(monkeypatch) -> None:
    """The in-process half of the test below: the bundled counts load from the package's files, never through
    ``importlib.resources.files`` (a MultiplexedPath when the top level is a namespace package)."""
    import importlib.resources

    from dllm_lit.corpus import char_ngrams, charlevel

    def refuse(*args, **kwargs):
        raise AssertionError("importlib.resources.files was called")

    monkeypatch.setattr(importlib.resources, "files", refuse)
    assert charlevel._english_resource().is_file()
    assert char_ngrams.load_english_ngram_counts(2).shape == (27 ** 2, 27)


@pytest.mark.slow  # a fresh interpreter (6 CPU s); the in-process half runs by default
def test_readme_python_snippet_runs_from_a_clones_parent_folder(tmp_path) -> None:
    """README's Python snippet, pasted into ``python`` in the folder that holds the clone (named ``dllm_lit``):
    the clone is then a namespace package ``dllm_lit`` and the editable install serves the modules; the bundled
    data must still load (it was read through ``importlib.resources.files("dllm_lit")``: a MultiplexedPath)."""
    import os
    import subprocess
    import sys

    snippet = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)[0]
    (tmp_path / "dllm_lit").mkdir()  # the clone's folder, seen from its parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = EDITABLE_FINDER.format(repo=str(REPO)) + snippet
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) >= 0  # the snippet prints the KL
