"""Presets of ``seqlab embed train``: ``configs/embed/<name>.yaml`` (or any YAML file) with
the method and its settings, so that the embedding table of docs/results.md is one
command away (``seqlab embed train embed/sgns``). Flags given on the command line win over
the preset; what neither sets takes the CLI defaults.

    method: sgns            # sgns | glove | ppmi
    dim: 100
    minutes: 6              # and epochs, window, min_count, seed, glove_adagrad,
                            # sources (a list), subsample, out

The presets live in a folder of their own because ``configs/*.yaml`` are run configs
(``seqlab train``), which these are not.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from seqlab.errors import DataError

__all__ = ["EMBED_PRESET_DIR", "apply_preset", "load_embed_preset"]

EMBED_PRESET_DIR = Path(__file__).resolve().parents[2] / "configs" / "embed"
# key → (accepted types, CLI default)
KEYS: dict[str, tuple[tuple[type, ...], Any]] = {
    "method": ((str,), None),
    "dim": ((int,), 100),
    "epochs": ((int,), None),
    "minutes": ((int, float), None),
    "window": ((int,), None),
    "min_count": ((int,), 5),
    "seed": ((int,), 0),
    "glove_adagrad": ((str,), "paper"),
    "sources": ((list,), None),
    "subsample": ((int, float), None),
    "out": ((str,), None),
}


def _path(name: str) -> Path | None:
    given = Path(name)
    if given.suffix in (".yaml", ".yml"):
        return given
    shipped = EMBED_PRESET_DIR.parent / f"{name}.yaml"  # "embed/sgns"
    return shipped if shipped.is_file() else None


def load_embed_preset(name: str, methods: tuple[str, ...]) -> dict[str, Any]:
    """The settings of preset ``name`` (a YAML path, or ``embed/<name>`` of the shipped
    ones), checked: known keys, their types, a known method."""
    path = _path(name)
    if path is None:
        shipped = ", ".join(f"embed/{p.stem}" for p in sorted(EMBED_PRESET_DIR.glob("*.yaml")))
        raise DataError(
            f"{name!r} is neither a method ({', '.join(methods)}) nor a preset file",
            hint=f"give a method, a YAML file, or a shipped preset: {shipped}",
        )
    if not path.is_file():
        raise DataError("no such preset file", path=path, hint="check the path")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise DataError("a preset is a mapping of settings", path=path, hint="key: value lines")
    for key, value in data.items():
        if key not in KEYS:
            raise DataError(f"unknown key {key!r}", path=path, hint=f"keys: {', '.join(KEYS)}")
        types = KEYS[key][0]
        if not isinstance(value, types) or isinstance(value, bool):
            want = " or ".join(t.__name__ for t in types)
            raise DataError(f"{key}: expected {want}, got {value!r}", path=path, hint="fix it")
    if data.get("method") not in methods:
        raise DataError(
            f"method: expected one of {', '.join(methods)}, got {data.get('method')!r}",
            path=path,
            hint="set method",
        )
    return data


def apply_preset(args: argparse.Namespace, methods: tuple[str, ...]) -> None:
    """Fill ``args`` (``seqlab embed train``'s): the preset's values where no flag was given
    (when ``args.method`` names a preset), then the CLI defaults."""
    if args.method not in methods:
        for key, value in load_embed_preset(args.method, methods).items():
            if key == "method":
                args.method = value
            elif getattr(args, key) is None:
                setattr(args, key, ",".join(value) if key == "sources" else value)
    for key, (_, default) in KEYS.items():
        if key != "method" and getattr(args, key) is None:
            setattr(args, key, default)
