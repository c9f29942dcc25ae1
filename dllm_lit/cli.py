"""Command-line entry point: a LightningCLI over samplers and the Markov data module.

    python cli.py predict --config configs/mdlm.yaml [--model.steps 64] [--data.num_sequences 128]
                          [--data.seq_len 256] [--seed_everything 7]

The sampler class is chosen by ``model.class_path`` in the YAML; the chain by ``data.source``.
Every predict run writes ``metrics.json`` and ``metrics.csv`` into ``trainer.default_root_dir``.
"""
from __future__ import annotations

import os
import sys
import warnings

from lightning.pytorch.cli import LightningCLI

from dllm_lit.data.datamodule import MarkovDataModule
from dllm_lit.results.writer import ResultsWriter
from dllm_lit.samplers.base import Sampler

__all__ = ["DllmCLI", "main"]


class DllmCLI(LightningCLI):
    """LightningCLI with dllm_lit's defaults: a ``results`` group (ResultsWriter), no checkpoints, no logger."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ResultsWriter, "results")

    def __init__(self, args=None, run: bool = True) -> None:
        super().__init__(
            model_class=Sampler,
            datamodule_class=MarkovDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            trainer_defaults={
                "logger": False,
                "enable_checkpointing": False,
                "enable_model_summary": False,
                "accelerator": "auto",
                "devices": 1,
            },
            save_config_kwargs={"overwrite": True},
            args=args,
            run=run,
        )


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
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*predict_dataloader.*num_workers.*")
    try:
        return DllmCLI(args=args)
    except USER_ERRORS as exc:
        cause = _user_error(exc)
        if cause is None or os.environ.get("DLLM_LIT_TRACEBACK"):
            raise
        print(f"error: {cause}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
