"""The run directory: everything one training run leaves behind (DESIGN §7).

    runs/reverse-transformer-20250101-120000/
      config.yaml        the resolved RunConfig (``seqlab train config.yaml`` re-runs it)
      fingerprint.json   versions, device, threads, seed, git commit (USER-NEEDS §7)
      tokenizer.json     the task's tokenizer state, when it has one
      metrics.jsonl      one JSON object per event (train log, validation, resume, final)
      checkpoints/
        step-000100/     tensors.safetensors + meta.json (seqlab.train.checkpoint)
        step-000200/     the last ``keep_last`` step checkpoints
        best/            model weights of the best validation score so far

Only rank 0 writes. A non-empty directory is never reused silently: pass ``overwrite=True``
(``--overwrite``) to replace a previous seqlab run, or resume it.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from seqlab.atomic_file import write_atomic
from seqlab.errors import SeqlabError
from seqlab.train.checkpoint import latest_checkpoint, read_checkpoint

CONFIG = "config.yaml"
FINGERPRINT = "fingerprint.json"
TOKENIZER = "tokenizer.json"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
BEST = "best"


class RunDirError(SeqlabError, ValueError):
    """A run directory that cannot be created, reused or resumed."""


def default_run_dir(stem: str, root: str | Path = "runs") -> Path:
    """``runs/<stem>-YYYYmmdd-HHMMSS`` (``-2``, ``-3``… appended if that exists)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{stem}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def is_run_dir(path: str | Path) -> bool:
    """A directory seqlab made: it holds ``config.yaml`` or ``checkpoints/``."""
    path = Path(path)
    return (path / CONFIG).is_file() or (path / CHECKPOINTS).is_dir()


class RunDir:
    """Paths and writers of one run directory (construct with :meth:`create` or :meth:`open`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def best(self) -> Path:
        return self.checkpoints / BEST

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @classmethod
    def create(cls, path: str | Path, overwrite: bool = False) -> RunDir:
        """A fresh run directory. A non-empty ``path`` is refused unless ``overwrite`` and it is
        a previous seqlab run (anything else is never deleted)."""
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise RunDirError(f"run dir {root} exists and is a file; choose another --run-dir")
        if root.is_dir() and any(root.iterdir()):
            if not overwrite:
                raise RunDirError(
                    f"run dir {root} is not empty: pass --overwrite to replace it, "
                    f"--resume {root} to continue it, or choose another --run-dir"
                )
            if not is_run_dir(root):
                raise RunDirError(
                    f"run dir {root} is not empty and is not a seqlab run (no {CONFIG}, no "
                    f"{CHECKPOINTS}/); refusing to delete it even with --overwrite"
                )
            shutil.rmtree(root)
        (root / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
        return cls(root)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """An existing run directory, for resuming; it must hold a step checkpoint."""
        run = cls(Path(path))
        run.latest()  # raises with a clear message if there is nothing to resume
        return run

    def latest(self) -> Path:
        """The newest ``checkpoints/step-N``; RunDirError if there is none."""
        if not self.root.is_dir():
            raise RunDirError(f"cannot resume {self.root}: no such directory")
        found = latest_checkpoint(self.checkpoints)
        if found is None:
            what = "a seqlab run directory" if is_run_dir(self.root) else "not a seqlab run"
            raise RunDirError(
                f"cannot resume {self.root}: no checkpoints/step-NNNNNN inside ({what}); "
                "resume needs a run that saved at least one step checkpoint"
            )
        return found

    def clean_partial_saves(self) -> list[Path]:
        """Remove temporary directories a killed save left behind (``.step-….tmp-*``)."""
        removed = []
        if self.checkpoints.is_dir():
            for p in sorted(self.checkpoints.glob(".*.tmp-*")):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed

    # -- writers -------------------------------------------------------------------------------

    def write_config(self, config: dict[str, Any]) -> None:
        text = yaml.safe_dump(config, sort_keys=False)
        write_atomic(self.root / CONFIG, text)

    def write_json(self, name: str, data: Any) -> None:
        write_atomic(self.root / name, json.dumps(data, indent=1) + "\n")

    def truncate_metrics(self, after_step: int) -> int:
        """Drop ``metrics.jsonl`` records past ``after_step`` (written by a run killed after
        its last checkpoint) and a torn last line; returns how many were dropped."""
        if not self.metrics.is_file():
            return 0
        kept, dropped = [], 0
        for line in self.metrics.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if isinstance(record, dict) and int(record.get("step", 0)) > after_step:
                dropped += 1
                continue
            kept.append(line)
        write_atomic(self.metrics, "".join(f"{line}\n" for line in kept))
        return dropped


def find_checkpoint(path: str | Path, prefer: str = "best") -> Path:
    """The checkpoint directory ``path`` names: itself if it is one, else in a run directory
    ``checkpoints/best`` (``prefer="best"``) or the newest ``checkpoints/step-N``."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    if not path.exists():
        raise RunDirError(f"{path}: no such run directory or checkpoint")
    run = RunDir(path)
    if prefer == "best" and (run.best / "meta.json").is_file():
        return run.best
    if run.checkpoints.is_dir():
        return run.latest()
    if path.is_dir():
        raise RunDirError(
            f"{path} is neither a checkpoint (no meta.json) nor a run directory (no "
            f"{CHECKPOINTS}/); pass runs/NAME or runs/NAME/checkpoints/step-NNNNNN"
        )
    read_checkpoint(path)  # a file: let the checkpoint reader explain (pickle refusal etc.)
    raise RunDirError(f"{path} is not a seqlab checkpoint")  # pragma: no cover
