"""Named registries for models, tasks, searches and schedules (DESIGN §3).

A registry maps a name to a builder and the frozen config dataclass that builds it::

    @MODELS.register("transformer", TransformerConfig)
    class Transformer(nn.Module): ...

Discovery is by explicit import (``seqlab.catalog`` imports every module that
registers something); registering a name twice raises. Layers are never registered:
they are plain modules with typed arguments.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered name: the object it builds and the config dataclass that builds it."""

    name: str
    target: Any
    config_cls: type | None
    doc: str


class Registry:
    """A name → (target, config dataclass) table with helpful errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, config_cls: type | None = None) -> Callable[[T], T]:
        """Decorator registering ``target`` under ``name`` with its config dataclass."""
        if config_cls is not None and not dataclasses.is_dataclass(config_cls):
            raise TypeError(f"{self.kind} '{name}': config_cls must be a dataclass")

        def decorate(target: T) -> T:
            if name in self._entries:
                other = self._entries[name].target
                raise KeyError(
                    f"{self.kind} '{name}' is already registered by "
                    f"{getattr(other, '__module__', '?')}.{getattr(other, '__qualname__', other)}"
                )
            doc = (getattr(target, "__doc__", None) or "").strip().splitlines()
            self._entries[name] = Entry(name, target, config_cls, doc[0] if doc else "")
            return target

        return decorate

    def get(self, name: str) -> Entry:
        """The entry for ``name``; unknown names raise with the closest valid ones."""
        try:
            return self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._entries, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            known = ", ".join(sorted(self._entries)) or "(none registered yet)"
            raise KeyError(f"unknown {self.kind} '{name}'.{hint} Known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)


MODELS = Registry("model")
TASKS = Registry("task")
SEARCHES = Registry("search")
SCHEDULES = Registry("schedule")

ALL: dict[str, Registry] = {
    "models": MODELS,
    "tasks": TASKS,
    "searches": SEARCHES,
    "schedules": SCHEDULES,
}
