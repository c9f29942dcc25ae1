"""Command-line entry point: a LightningCLI over samplers and the Markov data module.

    python cli.py predict --config configs/mdlm.yaml [--model.steps 64] [--data.num_sequences 128]
                          [--data.seq_len 256] [--seed_everything 7] [--plan.reference false]
    python cli.py sweep sweeps/paper_grid.yaml [--set num_sequences=64]   # a sweep's grid, locally
    python cli.py report outputs/sweeps/paper_grid --out reports/paper_grid  # tables and figures

The sampler class is chosen by ``model.class_path`` in the YAML; the chain by ``data.source``
(default: the bundled English character chain, N = 512, T = 1024, seed 123).  Before predict,
:func:`dllm_lit.engine.connect` wires the run; every run writes ``metrics.json`` and
``metrics.csv`` into ``results.output_dir`` (default ``trainer.default_root_dir``, itself
``outputs/<sampler name>`` unless set).
"""
from __future__ import annotations

import os
import sys
import warnings

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from dllm_lit.cli_messages import condense_parser_error

from dllm_lit.data.datamodule import MarkovDataModule
from dllm_lit.engine.wiring import connect
from dllm_lit.experiments import COMMANDS
from dllm_lit.results.writer import ResultsWriter, RunInterrupted
from dllm_lit.samplers.base import Sampler

__all__ = ["DllmCLI", "main", "DEFAULT_SEED"]

#: the seed of every shipped config (the paper's runs used seed 123)
DEFAULT_SEED = 123


class DllmParser(LightningArgumentParser):
    """The CLI's parser: a bad option ends with one line naming the field (exit 2), not a usage dump."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("DLLM_LIT_TRACEBACK"):
            return super().error(message, ex)
        sys.stderr.write(f"error: {condense_parser_error(message)}\n(run with --help for every option)\n")
        self.exit(2)


class DllmCLI(LightningCLI):
    """LightningCLI with dllm_lit's defaults: ``results`` (ResultsWriter) and ``plan`` groups, no checkpoints, no logger."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ResultsWriter, "results")
        parser.add_argument("--plan.reference", type=bool, default=True,
                            help="add the reference row of exact chain samples (AR baseline) to the run")
        parser.set_defaults({"data": {"class_path": "dllm_lit.data.MarkovDataModule"}})

    def __init__(self, args=None, run: bool = True) -> None:
        super().__init__(
            model_class=Sampler,
            datamodule_class=MarkovDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            seed_everything_default=DEFAULT_SEED,
            trainer_defaults={
                "logger": False,
                "enable_checkpointing": False,
                "enable_model_summary": False,
                "accelerator": "auto",
                "devices": 1,
            },
            save_config_kwargs={"overwrite": True},
            parser_class=DllmParser,
            args=args,
            run=run,
        )

    def before_instantiate_classes(self) -> None:
        """Default output directory ``outputs/<sampler>[_<variant>]`` when ``trainer.default_root_dir`` is unset."""
        cfg = self.config.get(self.subcommand) if self.subcommand else self.config
        trainer, model = cfg.get("trainer"), cfg.get("model")
        if trainer is None or model is None or trainer.get("default_root_dir") is not None:
            return
        name = str(model.get("class_path", "sampler")).rsplit(".", 1)[-1].lower()
        variant = (model.get("init_args") or {}).get("variant")
        trainer["default_root_dir"] = os.path.join("outputs", f"{name}_{variant}" if variant else name)

    def before_predict(self) -> None:
        """The one wiring step: chain -> sampler, plan -> data module / sampler / results writer."""
        writer = next((cb for cb in self.trainer.callbacks if isinstance(cb, ResultsWriter)), None)
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        connect(self.model, self.datamodule, writer, reference=bool(cfg["plan"]["reference"]))


#: exceptions that mean "bad input" (a setting, a missing file or model): shown as one clear line
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, OSError, RuntimeError)


def _user_error(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s cause chain whose message the user needs, if it is an input error.

    dllm_lit's own exception types (e.g. ModelNotAvailableError, ChainError) win, outermost first:
    they name the field and the remedy.  Otherwise the innermost built-in ValueError / OSError /
    RuntimeError: jsonargparse wraps a constructor's ValueError (which names the field and the
    allowed values) in its own "Does not validate against any of the Union subtypes" error.
    """
    chain, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        if isinstance(e, USER_ERRORS) and type(e).__module__.startswith("dllm_lit"):
            return e
    builtin = [e for e in chain if isinstance(e, USER_ERRORS) and type(e).__module__ == "builtins"]
    return builtin[-1] if builtin else None


def main(args=None) -> DllmCLI:
    """Run the CLI; bad settings end with ``error: <message naming the field>`` and exit status 2.

    Set ``DLLM_LIT_TRACEBACK=1`` to see the full traceback instead.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv and argv[0] in COMMANDS:  # sweep / report: dllm_lit.experiments
        raise SystemExit(COMMANDS[argv[0]](argv[1:]))
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*predict_dataloader.*num_workers.*")
    try:
        return DllmCLI(args=args)
    except RunInterrupted as exc:  # SIGINT / SIGTERM: finished rows are on disk
        print(f"stopped: {exc}", file=sys.stderr)
        raise SystemExit(128 + exc.signum) from None
    except USER_ERRORS as exc:
        cause = _user_error(exc)
        if cause is None or os.environ.get("DLLM_LIT_TRACEBACK"):
            raise
        print(f"error: {cause}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
