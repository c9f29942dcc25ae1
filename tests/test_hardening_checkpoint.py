"""A .ckpt is a pickle: CheckpointDenoiser loads weights only, and runs nothing from a file unless trusted."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dllm_lit.cli import main
from dllm_lit.denoisers import CheckpointDenoiser, DenoiserLoadError

REPO = Path(__file__).resolve().parents[1]


class _WritesMarker:
    """Unpickling this object calls ``exec`` with code that writes ``marker`` (what a hostile file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _malicious(tmp_path: Path) -> tuple[Path, Path]:
    marker, ckpt = tmp_path / "marker.txt", tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"model.w": torch.zeros(2)}, "payload": _WritesMarker(marker)}, ckpt)
    return ckpt, marker


def test_malicious_checkpoint_is_refused_and_runs_nothing(tmp_path) -> None:
    ckpt, marker = _malicious(tmp_path)
    with pytest.raises(DenoiserLoadError) as err:
        CheckpointDenoiser(str(ckpt))
    message = str(err.value)
    assert "\n" not in message and "builtins.exec" in message and "trust_checkpoint: true" in message
    assert not marker.exists()


def test_trust_checkpoint_is_the_only_way_to_unpickle(tmp_path) -> None:
    """The opt-in really unpickles in full: the object's code runs (then the file is not a checkpoint)."""
    ckpt, marker = _malicious(tmp_path)
    with pytest.raises(DenoiserLoadError, match="not a checkpoint of dllm_lit.training.DenoiserTraining"):
        CheckpointDenoiser(str(ckpt), trust_checkpoint=True)
    assert marker.read_text() == "ran"
    with pytest.raises(ValueError, match="trust_checkpoint must be"):
        CheckpointDenoiser(str(ckpt), trust_checkpoint="yes")


def test_cli_refuses_a_malicious_checkpoint_in_one_line(tmp_path, capsys) -> None:
    ckpt, marker = _malicious(tmp_path)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--config", str(REPO / "configs/mdlm.yaml"), "--model.denoiser",
              "dllm_lit.denoisers.CheckpointDenoiser", "--model.denoiser.init_args.path", str(ckpt),
              "--trainer.default_root_dir", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot load the denoiser checkpoint {str(ckpt)!r}: it holds")
    assert not marker.exists() and not (out / "metrics.json").exists()


def test_garbage_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "garbage.ckpt"
    bad.write_bytes(b"not a zip and not a pickle\n" * 10)
    with pytest.raises(DenoiserLoadError, match=r"not a readable torch file \(UnpicklingError: .*\)$") as err:
        CheckpointDenoiser(str(bad))
    assert "\n" not in str(err.value)


def test_untrusted_chain_files_are_refused_in_one_line(tmp_path) -> None:
    """The chain loaders (own artifact, the paper authors' file) name what they refused, in one line."""
    from dllm_lit.markov import ChainError, load_chain
    from dllm_lit.sources.paper_artifact import load_paper_artifact

    evil, marker = tmp_path / "evil.pt", tmp_path / "marker.txt"
    torch.save({"nbr_idx": torch.zeros(2, 1, dtype=torch.long), "payload": _WritesMarker(marker)}, evil)
    for load, start in ((load_chain, f"cannot read chain artifact {evil}: it holds objects"),
                        (load_paper_artifact, f"cannot read paper artifact {evil}: it holds objects")):
        with pytest.raises(ChainError) as err:
            load(evil)
        message = str(err.value)
        assert message.startswith(start) and "builtins.exec" in message and "\n" not in message
    assert not marker.exists()
