"""The LightningCLI of ``predict`` and ``fit``: parser, wiring hooks, set-up checks and one-line input errors.

``python cli.py predict ...`` / ``python cli.py fit ...`` land here through :func:`dllm_lit.cli.main` (which also
dispatches the other verbs); a grid point (:mod:`dllm_lit.experiments.point`) calls :func:`run` directly, so
the experiments never import the command-line dispatcher.
"""
from __future__ import annotations

import os
import sys
import warnings

import lightning as L
import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from dllm_lit.util import console
from dllm_lit.cli.messages import condense_parser_error, one_line
from dllm_lit.cli.precheck import GROUPS, check_seed, check_steps_arguments, precheck
from dllm_lit.cli.config_classes import documented_class
from dllm_lit.data.datamodule import MarkovDataModule
from dllm_lit.engine.process_group import watch_peers
from dllm_lit.engine.threads import sampling_threads
from dllm_lit.cli.wiring import connect, connect_training
from dllm_lit.results.signal_guard import RunStopped
from dllm_lit.results.writer import ResultsWriter, RunInterrupted
from dllm_lit.samplers import load_all
from dllm_lit.samplers.base import Sampler

__all__ = ["DEFAULT_SEED", "DllmCLI", "RunStopped", "exit_on_user_error", "run"]

load_all()  # every sampler class loaded: a config may name one by its class name alone

#: the seed of every shipped config (the paper's runs used seed 123)
DEFAULT_SEED = 123


class DllmParser(LightningArgumentParser):
    """The CLI's parser: a bad option ends with one line naming the field (exit 2), not a usage dump."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("DLLM_LIT_TRACEBACK"):
            return super().error(message, ex)
        sys.stderr.write(f"error: {condense_parser_error(message)} (run with --help for every option)\n")
        self.exit(2)


class DllmCLI(LightningCLI):
    """LightningCLI with dllm_lit's defaults: ``results`` (ResultsWriter) and ``plan`` groups, no checkpoints, no logger.

    Only ``fit`` and ``predict`` are offered (``validate`` / ``test`` have nothing to run).
    """

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        base = LightningCLI.subcommands()
        # predict samples with a wired sampler: a checkpoint path for the LightningModule means nothing there
        return {"fit": base["fit"], "predict": base["predict"] | {"ckpt_path"}}

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_lightning_class_args(ResultsWriter, "results")
        parser.add_argument("--plan.reference", type=bool, default=True,
                            help="add the reference row of exact chain samples (AR baseline) to the run")
        parser.set_defaults({"data": {"class_path": "dllm_lit.data.MarkovDataModule"}})

    def __init__(self, args=None, run: bool = True) -> None:
        super().__init__(
            model_class=L.LightningModule,
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
            auto_configure_optimizers=False,  # samplers train nothing; DenoiserTraining configures its own AdamW
            args=args,
            run=run,
        )

    def parse_arguments(self, parser, args) -> None:
        """Parse, then check the settings that would otherwise fail deep inside Lightning or torch."""
        args = sys.argv[1:] if args is None else args
        if isinstance(args, (list, tuple)) and args and str(args[0]) in GROUPS:
            precheck(str(args[0]), list(args[1:]))  # what the argument list and config files alone refuse
        else:
            check_steps_arguments(args)
        super().parse_arguments(parser, reset_switched_classes(args))
        cfg = self.config.get(self.config.get("subcommand")) if self.config.get("subcommand") else self.config
        check_environment(cfg)

    def before_instantiate_classes(self) -> None:
        """Refuse a model class the verb does not document (:mod:`dllm_lit.cli.config_classes`), then the default
        output directory when ``trainer.default_root_dir`` is unset: ``outputs/<config name>``.

        The config name is the first ``--config`` file's name, plus ``_<name>`` of each further one
        (``--config configs/mdlm.yaml --config configs/data/synthetic.yaml``: ``outputs/mdlm_synthetic``), so
        every config writes its own folder; without a config file, the lower-cased sampler class (and variant).
        """
        cfg = self.config.get(self.subcommand) if self.subcommand else self.config
        trainer, model = cfg.get("trainer"), cfg.get("model")
        kind = {"predict": "sampler", "fit": "training"}.get(self.subcommand)
        if kind is not None and model is not None:  # only the class the verb documents is built (nothing runs)
            documented_class(model.get("class_path"), kind, "model.class_path")
        if trainer is None or model is None or trainer.get("default_root_dir") is not None:
            return
        configs = [os.path.splitext(os.path.basename(str(getattr(c, "relative", c))))[0] for c in cfg.get("config") or []]
        if configs:
            name = "_".join(configs)
        else:
            name = str(model.get("class_path", "sampler")).rsplit(".", 1)[-1].lower()
            variant = (model.get("init_args") or {}).get("variant")
            name = f"{name}_{variant}" if variant else name
        trainer["default_root_dir"] = os.path.join("outputs", name)

    def after_predict(self) -> None:
        """One table of the run's rows and where its files are."""
        if getattr(self, "_stop_watch", None) is not None:
            self._stop_watch()
        torch.set_num_threads(getattr(self, "_threads", torch.get_num_threads()))
        writer = next((cb for cb in self.trainer.callbacks if isinstance(cb, ResultsWriter)), None)
        if writer is None or not self.trainer.is_global_zero or not getattr(writer, "rows", None):
            return
        out = writer.output_dir or self.trainer.default_root_dir
        console.log.info("results:\n%s\n[dllm_lit] written to %s", console.summary(writer.rows), os.path.abspath(out))

    def before_predict(self) -> None:
        """The one wiring step: chain -> sampler, plan -> data module / sampler / results writer."""
        if not isinstance(self.model, Sampler):
            raise ValueError(f"predict runs a sampler: model.class_path must name a dllm_lit.samplers class, "
                             f"got {type(self.model).__name__} (train denoisers with fit)")
        writer = next((cb for cb in self.trainer.callbacks if isinstance(cb, ResultsWriter)), None)
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        connect(self.model, self.datamodule, writer, reference=bool(cfg["plan"]["reference"]))
        if writer is not None:  # one live run per output folder: a second one is refused before it writes anything
            writer.claim_output(self.trainer)
        self._threads = torch.get_num_threads()
        torch.set_num_threads(sampling_threads())  # the step loops: see dllm_lit.engine.threads
        self._stop_watch = watch_peers(self.trainer)  # a multi-process run: an orphaned rank ends in one line

    def after_fit(self) -> None:
        """Validate once more at the end when the run stopped before its first validation (``max_steps`` below
        ``val_check_interval``), so every fit reports ``val/kl``."""
        if self.trainer.interrupted or "val/kl" in self.trainer.callback_metrics:
            return
        if self.trainer.limit_val_batches == 0:
            return
        self.trainer.validate(self.model, datamodule=self.datamodule, verbose=False)

    def before_fit(self) -> None:
        """Wire a training run: the chain's vocabulary and length build the model; data serves the chain."""
        from dllm_lit.training.module import DenoiserTraining

        if not isinstance(self.model, DenoiserTraining):
            raise ValueError(f"fit trains a denoiser: model.class_path must be dllm_lit.training.DenoiserTraining, "
                             f"got {type(self.model).__name__} (run samplers with predict)")
        connect_training(self.model, self.datamodule)


#: options whose class a command line may switch; the new class starts from its own defaults
SWITCHABLE = ("--data.source", "--model.denoiser")


def reset_switched_classes(args):
    """``--data.source NewClass`` becomes ``--data.source null --data.source NewClass``.

    jsonargparse keeps the previous class's values of same-named options when a later argument
    switches the class (e.g. an English source's ``eps: 0.0`` would silently replace the OWT-BPE
    default 1e-4); resetting the option first gives the new class its own defaults.
    """
    if not isinstance(args, (list, tuple)):
        return args
    out: list = []
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = str(arg).partition("=")
        if key in SWITCHABLE:
            if not eq and i + 1 < len(args):
                value = str(args[i + 1])
            if value and value != "null" and not value.lstrip().startswith("{"):
                out += [key, "null"]
        out.append(arg)
        i += 1
    return out


def check_environment(cfg) -> None:
    """Settings the machine cannot honour, as one ValueError naming the field (before anything runs)."""
    sampling_threads()  # DLLM_LIT_THREADS, if set, must be valid
    if cfg is None:
        return
    check_seed(cfg.get("seed_everything"))
    trainer = cfg.get("trainer") or {}
    accelerator = trainer.get("accelerator")
    if isinstance(accelerator, str) and accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(f"trainer.accelerator={accelerator} needs a CUDA GPU, and none is available here; "
                         "use cpu or auto")
    results = cfg.get("results") or {}
    device = results.get("lm_device")
    if isinstance(device, str) and device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"results.lm_device={device} needs a CUDA GPU, and none is available here; use cpu")


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


def run(args=None) -> DllmCLI:
    """``predict`` or ``fit`` with ``args`` (default ``sys.argv[1:]``); bad settings end with
    ``error: <message naming the field>`` and exit status 2, a stopped run with :class:`RunStopped`."""
    console.configure()
    warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")  # the frozen oracle used in validation
    try:
        return exit_on_user_error(DllmCLI, args=args)
    except RunInterrupted as exc:  # SIGINT / SIGTERM: finished rows are on disk
        print(f"stopped: {exc}", file=sys.stderr)
        raise RunStopped(128 + exc.signum) from None


def exit_on_user_error(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; an input error ends with ``error: <message>`` and exit status 2 (see :func:`main`)."""
    try:
        return fn(*args, **kwargs)
    except USER_ERRORS as exc:
        cause = _user_error(exc)
        if cause is None or os.environ.get("DLLM_LIT_TRACEBACK"):
            raise
        print(f"error: {one_line(cause)}", file=sys.stderr)
        raise SystemExit(2) from None
