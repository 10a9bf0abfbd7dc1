"""Tests of seqlab.data. ``SHARED_DATA`` locates the real datasets for the smoke tests."""

from __future__ import annotations

import os
from pathlib import Path


def _shared_data() -> Path | None:
    """``$SEQLAB_DATA_DIR`` if set, else ``<repo>/../shared/data``; None if it does not exist
    (a fresh clone has no shared/ next to it)."""
    env = os.environ.get("SEQLAB_DATA_DIR")
    path = Path(env) if env else Path(__file__).parents[2].parent / "shared" / "data"
    return path if path.is_dir() else None


SHARED_DATA = _shared_data()
