"""Unlabelled text for pretraining a language model that starts an MR classifier
(Dai & Le 2015; ``seqlab.models.lm_transfer``), written in the classifier's own tokens.

Sources (``../shared/data``, described in its README), one sentence per line:

- ``ptb``: PTB train (Mikolov's LM version), already lower-cased and tokenised in the
  Treebank style ("do n't", "'s"), kept as it is (``<unk>`` and ``N`` included);
- ``multi30k``: Multi30k English train captions, through the classify task's
  :func:`~seqlab.tasks.classification.clean_str` (Kim 2014's tokenizer);
- ``mr``: the MR sentences themselves (cp1252), through ``clean_str``, **without their
  labels**. Every fold's test sentences are among them, so a classifier started from this
  LM has read its test text (not its labels) during pretraining: the transductive setting
  of Dai & Le's Rotten Tomatoes experiment and of seqlab's SGNS vectors. Leave ``mr`` out
  for the strict inductive setting.

The lines are shuffled (seeded) so that the LM task's last-10 % validation split is a
mix of the sources; the file is written atomically.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from seqlab.data.mr import locate_mr, read_mr
from seqlab.data.readers import read_lines
from seqlab.errors import DataError

__all__ = ["LM_SOURCES", "pretraining_sentences", "write_pretraining_text"]

LM_SOURCES = ("ptb", "multi30k", "mr")


def pretraining_sentences(data_dir: str | Path, sources: Sequence[str] = LM_SOURCES) -> list[str]:
    """The sources' sentences, tokenised and joined by single spaces, in source order."""
    from seqlab.tasks.classification import clean_str  # the classifier's tokenizer

    unknown = [s for s in sources if s not in LM_SOURCES]
    if unknown or not sources:
        raise DataError(f"unknown LM corpus source(s) {unknown}", hint=f"choose from {LM_SOURCES}")
    root = Path(data_dir)
    lines: list[str] = []
    for source in sources:
        if source == "ptb":
            raw = read_lines(root / "ptb" / "ptb.train.txt.gz")
            lines += [" ".join(line.split()) for line in raw]
        elif source == "multi30k":
            raw = read_lines(root / "multi30k" / "task1" / "raw" / "train.en.gz")
            lines += [" ".join(clean_str(line)) for line in raw]
        else:
            lines += [" ".join(clean_str(text)) for text, _ in read_mr(locate_mr(root))]
    return [line for line in lines if line]


def write_pretraining_text(
    data_dir: str | Path, path: str | Path, sources: Sequence[str] = LM_SOURCES, seed: int = 0
) -> int:
    """Write the shuffled sentences to ``path`` (UTF-8, one per line); returns their number."""
    lines = pretraining_sentences(data_dir, sources)
    random.Random(seed).shuffle(lines)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    tmp.replace(path)
    return len(lines)
