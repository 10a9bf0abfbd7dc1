"""Checkpoints that load without unpickling: a directory of safetensors + JSON (DESIGN §7).

    step-000123/
      tensors.safetensors   every tensor: model.<key>, optim.state.<i>.<name>, sched.…,
                            scaler.…, rng.torch_cpu, rng.torch_cuda.<i>, sampler.…, extra.…
      meta.json             format_version, step, epoch, config, sampler/tokenizer state,
                            Python/NumPy RNG, optimizer param_groups + scalar state,
                            scheduler and grad-scaler state, tied-tensor aliases, versions

Nested states (``optimizer.state_dict()`` and the like) are split by :func:`encode`:
tensors go to ``tensors.safetensors`` under their dotted path and are replaced in the
JSON by ``{"__tensor__": key}``; tuples become ``{"__tuple__": [...]}`` and int-keyed
dicts ``{"__intkeys__": {...}}``, so :func:`decode` gives back the identical structure.

Tied tensors (an output projection sharing the embedding matrix) are stored once; the
other names are recorded in ``meta["aliases"]`` and point at the same tensor on load.

Writes are atomic: everything goes to a temporary sibling directory, files are fsynced,
then the directory is renamed into place (a checkpoint of the same name is first renamed
away, then deleted). A crash never leaves a half-written checkpoint under the final name.

Older formats load through ``MIGRATIONS[v]``: a function ``(meta, tensors) -> (meta,
tensors)`` taking format v to v + 1, applied in a chain up to :data:`FORMAT_VERSION`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

import seqlab
from seqlab.config import to_dict
from seqlab.errors import CheckpointError
from seqlab.train.rng import RngState, capture_rng_state, restore_rng_state

FORMAT_VERSION = 1
TENSORS_FILE = "tensors.safetensors"
META_FILE = "meta.json"
PICKLE_SUFFIXES = frozenset({".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".tar"})
STEP_DIR = re.compile(r"^step-(\d+)$")

Migration = Callable[[dict[str, Any], dict[str, Tensor]], tuple[dict[str, Any], dict[str, Tensor]]]
MIGRATIONS: dict[int, Migration] = {}  # format v -> function producing format v + 1

_TENSOR, _TUPLE, _INTKEYS = "__tensor__", "__tuple__", "__intkeys__"
_RESERVED = frozenset({_TENSOR, _TUPLE, _INTKEYS})


@dataclass
class CheckpointMeta:
    """What :func:`load_checkpoint` read besides the restored states."""

    path: Path
    format_version: int
    step: int
    epoch: int
    config: dict[str, Any] | None
    sampler_state: Any
    tokenizer_state: Any
    rng: RngState | None
    extra: dict[str, Any]
    versions: dict[str, Any]
    created: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def step_name(step: int) -> str:
    """``step-000123``: the directory name of the checkpoint taken after update ``step``."""
    return f"step-{step:06d}"


# --------------------------------------------------------------------------- encoding


def encode(obj: Any, key: str, tensors: dict[str, Tensor]) -> Any:
    """JSON form of ``obj``; its tensors are added to ``tensors`` under dotted keys."""
    if isinstance(obj, Tensor):
        if key in tensors:
            raise CheckpointError(f"two values are stored under the tensor key '{key}'")
        tensors[key] = obj
        return {_TENSOR: key}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            bad = _RESERVED.intersection(obj)
            if bad:
                raise CheckpointError(f"{key}: the key {sorted(bad)[0]!r} is reserved")
            return {k: encode(v, f"{key}.{k}", tensors) for k, v in obj.items()}
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj):
            return {_INTKEYS: {str(k): encode(v, f"{key}.{k}", tensors) for k, v in obj.items()}}
        raise CheckpointError(f"{key}: dict keys must be all str or all int, got {list(obj)}")
    if isinstance(obj, tuple):
        return {_TUPLE: [encode(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
        return obj.item()  # NumPy scalar
    raise CheckpointError(
        f"{key}: cannot store a {type(obj).__name__} in a checkpoint (only tensors, numbers, "
        "strings, None, lists, tuples and dicts)"
    )


def decode(obj: Any, tensors: dict[str, Tensor]) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if _TENSOR in obj:
        try:
            return tensors[obj[_TENSOR]]
        except KeyError:
            raise CheckpointError(
                f"meta.json refers to tensor '{obj[_TENSOR]}' which is not in {TENSORS_FILE}"
            ) from None
    if _TUPLE in obj:
        return tuple(decode(v, tensors) for v in obj[_TUPLE])
    if _INTKEYS in obj:
        return {int(k): decode(v, tensors) for k, v in obj[_INTKEYS].items()}
    return {k: decode(v, tensors) for k, v in obj.items()}


def _dedupe(tensors: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Store each shared tensor once: identical views become aliases, other overlapping
    views are cloned (safetensors refuses shared storage). Returns (cpu tensors, aliases)."""
    first: dict[tuple, str] = {}
    unique: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    for key, t in tensors.items():
        t = t.detach()
        if t.numel() > 0:
            sig = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), t.shape)
            sig += (t.stride(), t.dtype)
            if sig in first:
                aliases[key] = first[sig]
                continue
            first[sig] = key
        unique[key] = t
    storages = Counter(
        (t.device, t.untyped_storage().data_ptr()) for t in unique.values() if t.numel()
    )
    out = {}
    for key, t in unique.items():
        shared = t.numel() > 0 and storages[(t.device, t.untyped_storage().data_ptr())] > 1
        out[key] = (t.clone() if shared else t).cpu().contiguous()
    return out, aliases


# --------------------------------------------------------------------------- saving


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside DDP / DataParallel / torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


def _versions() -> dict[str, Any]:
    try:
        import numpy

        np_version: str | None = numpy.__version__
    except ImportError:  # pragma: no cover
        np_version = None
    return {
        "seqlab": seqlab.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np_version,
        "python": platform.python_version(),
    }


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (directories: where the OS allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    step: int,
    epoch: int = 0,
    config: Any = None,
    sampler_state: Any = None,
    tokenizer_state: Any = None,
    extra: dict[str, Any] | None = None,
    grad_scaler: torch.amp.GradScaler | None = None,
) -> Path:
    """Write a checkpoint directory at ``path`` atomically; returns ``path``.

    Captures the current RNG states of Python, NumPy, torch CPU and CUDA (if present).
    ``config`` is a config dataclass or a plain dict; ``sampler_state``,
    ``tokenizer_state`` and ``extra`` are nested dicts/lists of numbers, strings and
    tensors. ``scheduler`` / ``grad_scaler`` are anything with ``state_dict()``.
    """
    target = Path(path)
    if target.suffix in PICKLE_SUFFIXES:
        raise CheckpointError(
            f"{target}: a seqlab checkpoint is a directory, e.g. checkpoints/{step_name(step)}; "
            f"a '{target.suffix}' name suggests a pickle file"
        )
    tensors: dict[str, Tensor] = {}
    for k, v in _unwrap(model).state_dict().items():
        tensors[f"model.{k}"] = v
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = to_dict(config)
    rng = capture_rng_state()
    for k, v in rng.tensors.items():
        tensors[f"rng.{k}"] = v

    def state_of(obj: Any, key: str) -> dict[str, Any] | None:
        if obj is None:
            return None
        return {"class": type(obj).__name__, "state": encode(obj.state_dict(), key, tensors)}

    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "epoch": int(epoch),
        "config": encode(config, "config", tensors),
        "sampler_state": encode(sampler_state, "sampler", tensors),
        "tokenizer_state": encode(tokenizer_state, "tokenizer", tensors),
        "model_class": type(_unwrap(model)).__qualname__,
        "optimizer": state_of(optimizer, "optim"),
        "scheduler": state_of(scheduler, "sched"),
        "grad_scaler": state_of(grad_scaler, "scaler"),
        "rng": {"json": rng.json, "tensors": sorted(rng.tensors)},
        "extra": encode(extra or {}, "extra", tensors),
        "versions": _versions(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    stored, meta["aliases"] = _dedupe(tensors)
    _write_atomically(target, stored, meta)
    return target


def _write_atomically(target: Path, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()  # (mkdir honours the umask, unlike tempfile.mkdtemp's 0700)
    try:
        save_file(tensors, str(tmp / TENSORS_FILE), metadata={"format": "pt"})
        with open(tmp / META_FILE, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
        file_mode = tmp.stat().st_mode & 0o666  # the umask's file permissions
        for name in (TENSORS_FILE, META_FILE):
            os.chmod(tmp / name, file_mode)
            _fsync(tmp / name)
        _fsync(tmp)
        if target.exists():
            old = parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        _fsync(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- loading


def _pickle_refusal(path: Path) -> CheckpointError:
    return CheckpointError(
        f"{path} looks like a pickle / torch.save file. seqlab checkpoints are a directory "
        f"holding {TENSORS_FILE} + {META_FILE} and are loaded without unpickling, because "
        "unpickling can run arbitrary code. If you trust this file, convert it once: "
        f"state = torch.load('{path}', map_location='cpu', weights_only=True); "
        "model.load_state_dict(state); "
        "seqlab.train.checkpoint.save_checkpoint('converted/step-000000', model=model, step=0)"
    )


def _looks_pickled(head: bytes) -> bool:
    """torch.save zip archives start with 'PK\\x03\\x04'; pickles (protocol ≥ 2) with 0x80."""
    return head[:4] == b"PK\x03\x04" or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


def _head(path: Path, n: int = 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _old_copies(path: Path) -> list[Path]:
    parent = path.parent
    if not parent.is_dir():
        return []
    return sorted(parent.glob(f".{path.name}.old-*"))


def _open_meta(path: Path) -> tuple[dict[str, Any], Path]:
    """All checks short of reading tensors: refuse pickles, parse meta.json, check version."""
    if not path.exists():
        hint = ""
        old = _old_copies(path)
        if old:
            hint = f"; a previous copy was left at {old[-1]} by an interrupted save: rename it"
        raise CheckpointError(f"no checkpoint at {path}{hint}")
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES or _looks_pickled(_head(path)):
            raise _pickle_refusal(path)
        raise CheckpointError(
            f"{path} is a file; a seqlab checkpoint is a directory holding {TENSORS_FILE} "
            f"and {META_FILE}: pass the directory"
        )
    meta_path, tensors_path = path / META_FILE, path / TENSORS_FILE
    if not meta_path.is_file() or not tensors_path.is_file():
        files = sorted(p.name for p in path.iterdir())
        pickled = [f for f in files if Path(f).suffix in PICKLE_SUFFIXES]
        if pickled:
            raise _pickle_refusal(path / pickled[0])
        missing = META_FILE if not meta_path.is_file() else TENSORS_FILE
        raise CheckpointError(
            f"{path} is not a seqlab checkpoint: {missing} is missing (found: "
            f"{', '.join(files) or 'nothing'})"
        )
    head = _head(tensors_path)
    if head[8:9] != b"{":
        if _looks_pickled(head):
            raise _pickle_refusal(tensors_path)
        raise CheckpointError(f"{tensors_path}: not a safetensors file (corrupt or truncated)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{meta_path}:{exc.lineno}:{exc.colno}: corrupt JSON ({exc.msg}); the checkpoint "
            "is damaged — use an earlier one"
        ) from None
    except UnicodeDecodeError:
        raise CheckpointError(f"{meta_path}: not UTF-8 text; the checkpoint is damaged") from None
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{meta_path}: no integer 'format_version'; not a seqlab checkpoint")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {version}, written by a newer seqlab; this seqlab "
            f"({seqlab.__version__}) reads formats up to {FORMAT_VERSION}: upgrade seqlab"
        )
    return meta, tensors_path


def read_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Validated, migrated ``(meta, tensors)`` of a checkpoint directory (aliases filled)."""
    path = Path(path)
    meta, tensors_path = _open_meta(path)
    version = meta["format_version"]
    try:
        tensors = load_file(str(tensors_path), device=str(map_location))
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{tensors_path}: cannot read tensors ({exc})") from None
    while version < FORMAT_VERSION:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            raise CheckpointError(
                f"{path} has checkpoint format {version} and there is no migration from it "
                f"(known: {sorted(MIGRATIONS) or 'none'}); this seqlab reads {FORMAT_VERSION}"
            )
        meta, tensors = migrate(meta, tensors)
        if meta.get("format_version") != version + 1:
            raise CheckpointError(f"migration from format {version} did not produce {version + 1}")
        version += 1
    for alias, target in meta.get("aliases", {}).items():
        if target not in tensors:
            raise CheckpointError(f"{path}: alias '{alias}' points at missing tensor '{target}'")
        tensors[alias] = tensors[target]
    return meta, tensors


def _load_state(obj: Any, saved: dict | None, what: str, tensors: dict[str, Tensor]) -> None:
    if saved is None:
        raise CheckpointError(f"the checkpoint holds no {what} state, but a {what} was given")
    if saved["class"] != type(obj).__name__:
        raise CheckpointError(
            f"the checkpoint's {what} is a {saved['class']}, the given one a "
            f"{type(obj).__name__}; build the same {what} the run was saved with"
        )
    state = decode(saved["state"], tensors)
    if not state:  # e.g. a disabled GradScaler: nothing to restore
        return
    try:
        obj.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"cannot restore the {what} state: {exc}") from None


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    grad_scaler: torch.amp.GradScaler | None = None,
    map_location: str | torch.device = "cpu",
    strict: bool = True,
) -> CheckpointMeta:
    """Restore the given objects from the checkpoint at ``path``; return its metadata.

    Build the scheduler before calling this (building a scheduler resets the optimizer's
    lr). RNG states are returned in ``meta.rng``, not applied: call :func:`restore_rng`.
    ``strict`` makes missing/unexpected model keys an error.
    """
    meta, tensors = read_checkpoint(path, map_location)
    if model is not None:
        state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        try:
            missing, unexpected = _unwrap(model).load_state_dict(state, strict=False)
        except RuntimeError as exc:
            raise CheckpointError(f"{path}: the model does not fit the checkpoint: {exc}") from None
        if strict and (missing or unexpected):
            raise CheckpointError(
                f"{path}: model keys differ from the checkpoint — missing: {missing[:10]}, "
                f"unexpected: {unexpected[:10]} (renamed layers need a migration)"
            )
    if optimizer is not None:
        _load_state(optimizer, meta.get("optimizer"), "optimizer", tensors)
    if scheduler is not None:
        _load_state(scheduler, meta.get("scheduler"), "scheduler", tensors)
    if grad_scaler is not None:
        _load_state(grad_scaler, meta.get("grad_scaler"), "grad scaler", tensors)
    rng_meta = meta.get("rng")
    rng = None
    if rng_meta is not None:
        rng_tensors = {k: tensors[f"rng.{k}"] for k in rng_meta["tensors"]}
        rng = RngState(json=rng_meta["json"], tensors=rng_tensors)
    return CheckpointMeta(
        path=Path(path),
        format_version=meta["format_version"],
        step=meta["step"],
        epoch=meta.get("epoch", 0),
        config=decode(meta.get("config"), tensors),
        sampler_state=decode(meta.get("sampler_state"), tensors),
        tokenizer_state=decode(meta.get("tokenizer_state"), tensors),
        rng=rng,
        extra=decode(meta.get("extra") or {}, tensors),
        versions=meta.get("versions", {}),
        created=meta.get("created", ""),
        raw=meta,
    )


def restore_rng(meta: CheckpointMeta) -> None:
    """Put every RNG back in the state it had when the checkpoint was saved."""
    if meta.rng is None:
        raise CheckpointError(f"{meta.path}: the checkpoint holds no RNG state")
    restore_rng_state(meta.rng)


def describe_checkpoint(path: str | Path) -> str:
    """A human-readable summary (step, states, every tensor's dtype and shape) read from
    ``meta.json`` and the safetensors header only: no tensor data is loaded."""
    path = Path(path)
    meta, tensors_path = _open_meta(path)
    v = meta.get("versions", {})
    opt, sched = meta.get("optimizer"), meta.get("scheduler")
    sched_name = sched and sched["class"]
    if sched and isinstance(sched["state"].get("schedule"), dict):
        sched_name += f" ({sched['state']['schedule']['name']})"
    lines = [
        f"checkpoint {path}: format {meta['format_version']}, step {meta.get('step')}, "
        f"epoch {meta.get('epoch')}, saved {meta.get('created')} by seqlab {v.get('seqlab')} "
        f"/ torch {v.get('torch')}",
        f"model {meta.get('model_class')}; optimizer {opt and opt['class']}; "
        f"scheduler {sched_name}; config {'yes' if meta.get('config') else 'no'}; "
        f"rng {', '.join(['python', 'numpy'] + meta.get('rng', {}).get('tensors', []))}",
    ]
    with safe_open(str(tensors_path), framework="pt") as f:
        keys = sorted(f.keys())
        lines.append(f"tensors ({len(keys)}):")
        for k in keys:
            sl = f.get_slice(k)
            lines.append(f"  {k:<40} {sl.get_dtype():<5} {tuple(sl.get_shape())}")
    for alias, target in sorted(meta.get("aliases", {}).items()):
        lines.append(f"alias {alias} -> {target}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- retention


def step_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step-N`` checkpoint directory in ``run_dir``, by step."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for p in run_dir.iterdir():
        m = STEP_DIR.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The ``step-N`` checkpoint with the largest N, or None."""
    found = step_checkpoints(run_dir)
    return found[-1][1] if found else None


def keep_checkpoints(run_dir: str | Path, keep_last: int, best: str | None = None) -> list[Path]:
    """Delete all but the last ``keep_last`` step checkpoints; never the one named ``best``.

    Only directories named ``step-N`` are considered (a ``best`` copy under another name
    is never touched either). Returns the deleted paths.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    found = step_checkpoints(run_dir)
    doomed = found[: max(0, len(found) - keep_last)]
    deleted = []
    for _, p in doomed:
        if best is not None and p.name == Path(best).name:
            continue
        shutil.rmtree(p)
        deleted.append(p)
    return deleted
