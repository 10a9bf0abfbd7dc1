"""User-facing errors. The CLI prints their message in one line and exits with code 2.

Each message says what is wrong, where (file, line, field) and what to do.
"""

from __future__ import annotations

from pathlib import Path


class SeqlabError(Exception):
    """Base of every error caused by the user's input rather than by a bug."""


def _where(path: str | Path | None, line: int | None) -> str:
    if path is None:
        return ""
    return f"{path}:{line}: " if line is not None else f"{path}: "


class DataError(SeqlabError, ValueError):
    """Invalid or missing data: ``DataError("not UTF-8", path=p, line=3, hint="re-encode")``."""

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.path, self.line, self.hint = path, line, hint
        text = _where(path, line) + message
        if hint:
            text += f" — {hint}"
        super().__init__(text)


class CheckpointError(SeqlabError, ValueError):
    """A checkpoint that cannot be read safely (missing, corrupt, pickled, wrong version)."""
