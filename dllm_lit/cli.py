"""Command-line entry point: a LightningCLI over samplers and the Markov data module.

    python cli.py predict --config configs/mdlm.yaml [--model.steps 64] [--data.num_sequences 128]
                          [--data.seq_len 256] [--seed_everything 7]

The sampler class is chosen by ``model.class_path`` in the YAML; the chain by ``data.source``.
Every predict run writes ``metrics.json`` and ``metrics.csv`` into ``trainer.default_root_dir``.
"""
from __future__ import annotations

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


def main(args=None) -> DllmCLI:
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*predict_dataloader.*num_workers.*")
    return DllmCLI(args=args)


if __name__ == "__main__":
    main()
