"""Typed configuration: dataclass defaults → preset YAML → dotted overrides (DESIGN §3).

Every value is checked against its field's type (``int``, ``float``, ``bool``, ``str``,
``Literal[...]``, ``X | None``, ``tuple[...]``/``list[...]`` of those, nested dataclasses).
Unknown keys are rejected with the closest valid name and the place they came from
(file and line for YAML, the command-line argument for overrides).

    cfg = resolve(TransformerConfig, preset="configs/x.yaml", overrides=["d_model=256"])
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

from seqlab.errors import SeqlabError

C = TypeVar("C")


class ConfigError(SeqlabError, ValueError):
    """A configuration value or key is wrong; the message says where and what to do."""


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def closest_hint(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check ``value`` against the type ``hint`` and convert where it is lossless."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _coerce(value, arm, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits no type")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value))
        if origin is tuple and args:
            if len(args) != len(value):
                raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(
                _coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args))
            )
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {hint.__name__}, got {value!r}")
        return from_dict(hint, value, where)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "5e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    raise ConfigError(f"{where}: unsupported config type {hint!r}")


def from_dict(cls: type[C], data: dict[str, Any], where: str = "config") -> C:
    """Build dataclass ``cls`` from a mapping, checking every key and value."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in hints or key not in names:
            raise ConfigError(
                f"{where}: unknown key '{key}' for {cls.__name__}.{closest_hint(key, names)} "
                f"Valid keys: {', '.join(names)}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict (tuples become lists) ready for YAML/JSON."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; syntax errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such preset file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: invalid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a preset must be a YAML mapping, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'model.d_model=256'`` → (['model', 'd_model'], 256); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected key=value, e.g. model.d_model=256")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}': empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {'.'.join(path)}: '{part}' is not a section")
    node[path[-1]] = value


def resolve(
    cls: type[C], preset: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> C:
    """Defaults of ``cls`` ← preset YAML ← dotted overrides, validated field by field."""
    data = to_dict(cls())
    if preset is not None:
        loaded = load_yaml(preset)  # validates existence, encoding and syntax first
        merged = deep_merge(data, loaded, cls, str(preset), key_lines(preset), ())
    else:
        merged = data
    for text in overrides:
        path, value = parse_override(text)
        _check_path(cls, path, f"override '{text}'")
        set_path(merged, path, value)
    return from_dict(cls, merged, where=str(preset) if preset else "config")


def _check_path(cls: type, path: list[str], where: str) -> None:
    node: Any = cls
    for part in path:
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"{where}: '{part}' is below a plain value")
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            raise ConfigError(f"{where}: unknown key '{part}'.{closest_hint(part, names)}")
        node = _hints(node)[part]


def key_lines(path: str | Path) -> dict[tuple[str, ...], int]:
    """1-based line of every key in a YAML file, by its path of keys."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = (*prefix, str(key_node.value))
                lines[key] = key_node.start_mark.line + 1
                walk(value_node, key)

    root = yaml.compose(Path(path).read_text(encoding="utf-8"))
    if root is not None:
        walk(root, ())
    return lines


def deep_merge(
    base: dict,
    update: dict,
    cls: type,
    file: str,
    lines: dict[tuple[str, ...], int],
    prefix: tuple[str, ...],
) -> dict:
    out = dict(base)
    names = [f.name for f in dataclasses.fields(cls)]
    hints = _hints(cls)
    for key, value in update.items():
        at = (*prefix, str(key))
        if key not in names:
            line = lines.get(at)
            where = f"{file}:{line}" if line else file
            raise ConfigError(
                f"{where}: unknown key '{'.'.join(at)}'.{closest_hint(str(key), names)}"
            )
        sub = hints[key]
        if dataclasses.is_dataclass(sub) and isinstance(value, dict):
            out[key] = deep_merge(out.get(key) or {}, value, sub, file, lines, at)
        else:
            out[key] = value
    return out


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
