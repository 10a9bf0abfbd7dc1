"""Pretrained word vectors into the embedding tables of a freshly built model.

Issue 5 asks that any task can initialise its embedding layer from a seqlab embedding file
(word2vec text format, ``seqlab embed train``). The classifier does it through its model's
``embedding_init``; the language-model and copy-translation tasks call ``load_vectors``
from ``Task.init_model`` on a new run (never when a checkpoint is restored: its weights
replace the vectors anyway, and the file may be gone). The copying itself is
``seqlab.data.word_vectors_io.init_embedding``: row i gets the vector of vocabulary token i
(exact word, else lower-cased, else ``<num>``), specials keep their rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from seqlab.data.vocab import Vocab

log = logging.getLogger(__name__)

__all__ = ["load_vectors"]


def load_vectors(
    model: nn.Module, names: Sequence[str], vocab: Vocab, path: Path, field: str
) -> float:
    """Copy the vectors of ``path`` into the first of ``model``'s attributes ``names`` that
    exists (an embedding with a (V, D) ``weight``); return the coverage (share of the
    vocabulary's non-special tokens found). ``field`` names the config key in errors and in
    the log line."""
    from seqlab.data.word_vectors_io import init_embedding

    table = next((getattr(model, n) for n in names if hasattr(model, n)), None)
    if table is None:
        raise ValueError(
            f"{field}: the model {type(model).__name__} has no embedding table "
            f"({' or '.join(names)}) to initialise"
        )
    with torch.no_grad():
        coverage = float(init_embedding(table, vocab, path))
    log.info("%s: %s covers %.1f%% of the vocabulary", field, path, 100 * coverage)
    return coverage
