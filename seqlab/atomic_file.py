"""One way to write a file so that a reader never sees half of it.

The data goes to a temporary file in the same folder (same file system), is flushed to
disk, and then renamed over the target with ``os.replace``, which is atomic on POSIX and
Windows. If anything fails, or the process is interrupted before the rename, the target is
untouched and the temporary file is removed. Used for configs, metrics, tokenizer models
and the benchmark sections of docs/results.md; checkpoints (a folder of files) have their
own directory-level scheme in seqlab/train/checkpoint.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) atomically, creating its
    folder if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
