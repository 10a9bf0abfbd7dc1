"""seqlab: the classic neural sequence models of the lecture notes, on PyTorch.

``seqlab.train(config, **overrides)`` and ``seqlab.load(path)`` (see ``seqlab.api``) are
imported on first use, so ``import seqlab`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load", "train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        # The subpackage seqlab.train is itself callable (= seqlab.api.train), so this
        # works whether or not seqlab.train was imported before.
        return importlib.import_module("seqlab.train")
    if name == "load":
        return importlib.import_module("seqlab.api").load
    raise AttributeError(f"module 'seqlab' has no attribute {name!r}")
