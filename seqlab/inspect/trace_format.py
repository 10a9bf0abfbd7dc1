"""The trace record: what a model computed for one input, as named arrays with their axes.

A trace is two files with one stem (docs/inspect.md, "Traces"):

    <stem>.json   the index: format, version, kind, model, task, checkpoint, step,
                  tokens (axis name → labels), info (free JSON) and, per array,
                  its shape, dtype, axes (one name per dimension) and meaning
    <stem>.npz    the arrays, by the same names (``numpy.load(..., allow_pickle=False)``)

An axis whose name is a key of ``tokens`` has exactly that many entries (the labels of
its rows or columns: ``source``, ``target``, ``input``); other axes (``layer``, ``head``,
``time``, ``location``, ``region`` …) are plain indices. Both files are written to a
temporary name and renamed (npz first, so a JSON that exists always has its arrays);
:func:`read_trace` checks everything the JSON promises and raises :class:`TraceError`
naming the file and the field that is wrong.

    record = Trace("translation", model="transformer", task="translation", ...)
    record.add("cross", weights, ("layer", "head", "target", "source"), "α: rows sum to 1")
    json_path, npz_path = write_trace(record, "runs/x/trace-0")
    same = read_trace("runs/x/trace-0.json")        # or the .npz, or the stem
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqlab.errors import SeqlabError
from seqlab.inspect.figures import write_json

__all__ = ["FORMAT", "VERSION", "Trace", "TraceError", "read_trace", "stem_of", "write_trace"]

FORMAT = "seqlab-trace"
VERSION = 1
_KEYS = ("kind", "model", "task", "checkpoint", "step", "tokens", "info", "arrays")


class TraceError(SeqlabError, ValueError):
    """A trace file that is missing, corrupt or does not match its index."""

    def __init__(self, path: str | Path, field_name: str, problem: str) -> None:
        self.path, self.field = Path(path), field_name
        super().__init__(f"{path}: field {field_name!r}: {problem}")


@dataclass
class Trace:
    """One record. ``arrays[name]`` has ``axes[name]`` (one name per dimension) and
    ``meaning[name]`` (one line: the symbol, its equation or invariant). ``tokens`` maps an
    axis name to its labels; ``info`` holds any other JSON (text, settings, summaries)."""

    kind: str
    model: str | None = None
    task: str | None = None
    checkpoint: str | None = None
    step: int | None = None
    tokens: dict[str, list[str]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    axes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    meaning: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, array: Any, axes: Sequence[str], meaning: str) -> None:
        """Store ``array`` (a Tensor or array-like) under ``name``; float tensors are kept in
        float32 (bf16 has no numpy dtype). Raises ValueError if the axes do not fit."""
        if hasattr(array, "detach"):  # a torch Tensor
            t = array.detach().cpu()
            array = t.float().numpy() if t.is_floating_point() else t.numpy()
        value = np.asarray(array)
        if value.ndim != len(axes):
            raise ValueError(f"{name}: {value.ndim} dimensions but axes {tuple(axes)}")
        self.arrays[name], self.axes[name], self.meaning[name] = value, tuple(axes), meaning

    def index(self) -> dict[str, Any]:
        """The JSON index (everything but the array values)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "model": self.model,
            "task": self.task,
            "checkpoint": self.checkpoint,
            "step": self.step,
            "tokens": self.tokens,
            "info": self.info,
            "arrays": {
                name: {
                    "shape": list(a.shape),
                    "dtype": a.dtype.str,
                    "axes": list(self.axes[name]),
                    "meaning": self.meaning[name],
                }
                for name, a in self.arrays.items()
            },
        }

    def describe(self) -> str:
        """One line: kind, model, token counts and every array's shape."""
        counts = ", ".join(f"{k} {len(v)}" for k, v in self.tokens.items())
        shapes = ", ".join(f"{n} {tuple(a.shape)}" for n, a in self.arrays.items())
        head = f"{self.kind} ({self.model})" if self.model else self.kind
        return f"{head}{'; tokens: ' + counts if counts else ''}; arrays: {shapes}"


def stem_of(path: str | Path) -> Path:
    """``x.json`` / ``x.npz`` / ``x`` → ``x`` (the common stem of a record's two files)."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".json", ".npz") else path


def _check_labels(trace: Trace, where: Path) -> None:
    for name, axes in trace.axes.items():
        for dim, axis in enumerate(axes):
            if axis in trace.tokens and len(trace.tokens[axis]) != trace.arrays[name].shape[dim]:
                raise TraceError(
                    where,
                    f"arrays.{name}.shape",
                    f"axis {dim} ({axis}) has {trace.arrays[name].shape[dim]} entries but "
                    f"tokens.{axis} has {len(trace.tokens[axis])} labels",
                )


def write_trace(trace: Trace, stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` then ``<stem>.json``, each atomically; returns (json, npz)."""
    stem = stem_of(stem)
    js, npz = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")
    _check_labels(trace, js)
    npz.parent.mkdir(parents=True, exist_ok=True)
    tmp = npz.with_name(npz.name + ".tmp")
    with tmp.open("wb") as f:  # a file object: numpy would append .npz to a name
        np.savez_compressed(f, **trace.arrays)
    tmp.replace(npz)
    write_json(js, trace.index(), ensure_ascii=False)
    return js, npz


def _need(cond: bool, path: Path, field_name: str, problem: str) -> None:
    if not cond:
        raise TraceError(path, field_name, problem)


def _read_index(js: Path) -> dict[str, Any]:
    _need(js.is_file(), js, "(file)", "no such file (a trace is <stem>.json + <stem>.npz)")
    try:
        data = json.loads(js.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(js, "(file)", f"not JSON ({exc})") from None
    _need(isinstance(data, dict), js, "(file)", "the index must be a JSON object")
    _need(data.get("format") == FORMAT, js, "format", f"expected {FORMAT!r}")
    _need(data.get("version") == VERSION, js, "version", f"expected {VERSION}")
    for key in _KEYS:
        _need(key in data, js, key, "missing")
    _need(isinstance(data["kind"], str), js, "kind", "must be a string")
    _need(data["step"] is None or isinstance(data["step"], int), js, "step", "int or null")
    for key in ("tokens", "info", "arrays"):
        _need(isinstance(data[key], dict), js, key, "must be a JSON object")
    for axis, labels in data["tokens"].items():
        ok = isinstance(labels, list) and all(isinstance(x, str) for x in labels)
        _need(ok, js, f"tokens.{axis}", "must be a list of strings")
    for name, spec in data["arrays"].items():
        where = f"arrays.{name}"
        _need(isinstance(spec, dict), js, where, "must be a JSON object")
        for key, kind in (("shape", list), ("dtype", str), ("axes", list), ("meaning", str)):
            _need(isinstance(spec.get(key), kind), js, f"{where}.{key}", f"missing or not {kind}")
        _need(len(spec["axes"]) == len(spec["shape"]), js, f"{where}.axes", "one per dimension")
    return data


def read_trace(path: str | Path) -> Trace:
    """Load and check a record (``<stem>.json``, ``<stem>.npz`` or the stem).

    Raises :class:`TraceError` ("FILE: field 'F': problem") when a file is missing or
    unreadable, a field is missing or mistyped, or an array is missing, extra, or has
    another shape or dtype than the index says."""
    stem = stem_of(path)
    js, npz = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")
    data = _read_index(js)
    _need(npz.is_file(), npz, "(file)", f"no such file (the arrays of {js.name})")
    try:
        with np.load(npz, allow_pickle=False) as z:
            stored = {name: z[name] for name in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise TraceError(npz, "(file)", f"not a readable npz ({exc})") from None
    extra = sorted(set(stored) - set(data["arrays"]))
    _need(not extra, npz, extra[0] if extra else "", f"array not listed in {js.name}")
    trace = Trace(
        data["kind"], data["model"], data["task"], data["checkpoint"], data["step"],
        data["tokens"], data["info"],
    )  # fmt: skip
    for name, spec in data["arrays"].items():
        _need(name in stored, npz, name, f"missing (listed in {js.name})")
        a = stored[name]
        _need(list(a.shape) == spec["shape"], npz, name, f"shape {a.shape} != {spec['shape']}")
        _need(a.dtype.str == spec["dtype"], npz, name, f"dtype {a.dtype.str} != {spec['dtype']}")
        trace.add(name, a, spec["axes"], spec["meaning"])
    _check_labels(trace, js)
    return trace
