"""A read-only mapping whose values are computed on first access and then kept.

Used by tasks restored from a checkpoint: the tokenizer comes from the checkpoint, and a
data split is read (and encoded) only when something asks for it, so translating needs no
corpus and evaluating ``test`` reads only the test files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class LazySplits(Mapping[str, V], Generic[V]):
    """``keys`` known up front; ``load(key)`` runs once per key, on first ``[key]``.

    ``keys``, ``in`` and ``len`` never load anything; iterating values loads them all.
    ``replace(key, value)`` swaps a loaded value (a task filtering its training split).
    """

    def __init__(self, keys: Iterable[str], load: Callable[[str], V]) -> None:
        self._keys = tuple(keys)
        self._load = load
        self._values: dict[str, V] = {}

    def __getitem__(self, key: str) -> V:
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._values:
            self._values[key] = self._load(key)
        return self._values[key]

    def replace(self, key: str, value: V) -> None:
        if key not in self._keys:
            raise KeyError(key)
        self._values[key] = value

    def loaded(self) -> tuple[str, ...]:
        """The keys already loaded, in key order."""
        return tuple(k for k in self._keys if k in self._values)

    def __contains__(self, key: object) -> bool:  # Mapping's default would load the value
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
