"""CoNLL-format tagging files (CoNLL-2003 NER, Tjong Kim Sang & De Meulder 2003).

One token per line, space- (or tab-) separated columns, the tag in the last column
(``TOKEN POS CHUNK NER`` in CoNLL-2003); an empty line ends a sentence; documents begin
with ``-DOCSTART- …`` lines, which are not sentences and are skipped. Files may be
gzipped (``.gz``). Tags are IOB2 (every entity starts with ``B-``, shared/data/README.md
§4); ``scheme="iob1"`` reads the original IOB1 files and converts them to IOB2.

The reader checks every line: a constant column count, a tag of the form ``O``, ``B-X``
or ``I-X`` (or in ``tagset`` when given), and, for IOB2, that no ``I-X`` begins an entity.
Every error names file and line (:class:`~seqlab.errors.DataError`).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqlab.errors import DataError

__all__ = [
    "CONLL2003_FILES",
    "CONLL2003_TAGS",
    "Sentence",
    "entity_spans",
    "iob1_to_iob2",
    "locate_conll2003",
    "read_conll",
]

CONLL2003_TAGS: tuple[str, ...] = (
    "O",
    "B-PER",
    "I-PER",
    "B-LOC",
    "I-LOC",
    "B-ORG",
    "I-ORG",
    "B-MISC",
    "I-MISC",
)
CONLL2003_FILES = {"train": "train.txt.gz", "valid": "valid.txt.gz", "test": "test.txt.gz"}
_TAG = re.compile(r"^(O|[BI]-\S+)$")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its tokens, their tags and the 1-based line of its first token."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    line: int


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without the newline); undecodable bytes raise with the line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})",
                    path=path,
                    line=number,
                    hint="CoNLL files are ASCII/UTF-8; re-encode the file",
                ) from None


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 → IOB2: an ``I-X`` that begins an entity (after ``O`` or another type, or
    first) becomes ``B-X``; IOB1's ``B-X`` (between two adjacent X entities) stays."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return out


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of an IOB2 sequence as (type, start, end), end exclusive.

    Read as conlleval (and seqeval's default mode) do: ``B-X`` starts an entity, ``I-X``
    continues one of type X, and an ``I-X`` that cannot continue (after ``O`` or another
    type) starts a new one, so a model's invalid output is still scored.
    """
    spans: list[tuple[str, int, int]] = []
    kind, start = None, 0
    for t, tag in enumerate(list(tags) + ["O"]):
        prefix, cur = (tag[0], tag[2:]) if tag != "O" else ("O", None)
        if kind is not None and (prefix != "I" or cur != kind):
            spans.append((kind, start, t))
            kind = None
        if prefix == "B" or (prefix == "I" and kind is None):
            kind, start = cur, t
    return spans


def read_conll(
    path: str | Path,
    *,
    n_columns: int | None = None,
    tag_column: int = -1,
    tagset: Sequence[str] | None = None,
    scheme: Literal["iob2", "iob1"] = "iob2",
) -> list[Sentence]:
    """Read a CoNLL-format file into sentences (``-DOCSTART-`` lines skipped).

    ``n_columns``: the columns every token line must have (None: whatever the first line
    has). ``tag_column``: which column holds the tag (default the last). ``tagset``: the
    allowed tags (None: any ``O`` / ``B-X`` / ``I-X``).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", path=path, hint="check the path (or task.data_dir)")
    allowed = set(tagset) if tagset is not None else None
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    first = 0

    def close() -> None:
        if tokens:
            final = iob1_to_iob2(tags) if scheme == "iob1" else list(tags)
            sentences.append(Sentence(tuple(tokens), tuple(final), first))
        tokens.clear()
        tags.clear()

    for number, text in _lines(path):
        fields = text.split()
        if not fields:
            close()
            continue
        if fields[0] == "-DOCSTART-":
            close()
            continue
        if n_columns is None:
            n_columns = len(fields)
            if not -n_columns <= tag_column < n_columns or n_columns < 2:
                raise DataError(
                    f"{n_columns} column(s): need a token and a tag (tag_column={tag_column})",
                    path=path,
                    line=number,
                    hint="one token per line: TOKEN [more columns …] TAG",
                )
        if len(fields) != n_columns:
            raise DataError(
                f"{len(fields)} columns, expected {n_columns} ({text!r})",
                path=path,
                line=number,
                hint="every token line has the same columns; sentences end with an empty line",
            )
        tag = fields[tag_column]
        bad_form = _TAG.match(tag) is None
        if bad_form or (allowed is not None and tag not in allowed):
            known = ", ".join(tagset) if tagset is not None else "O, B-X, I-X"
            raise DataError(
                f"unknown tag {tag!r} in column {tag_column % n_columns + 1}",
                path=path,
                line=number,
                hint=f"tags must be one of: {known}",
            )
        if scheme == "iob2" and tag.startswith("I-"):
            prev = tags[-1] if tags else "O"
            if prev[2:] != tag[2:]:  # "O"[2:] is "", never a type
                raise DataError(
                    f"{tag} after {prev} is not valid IOB2 (an entity must start with B-)",
                    path=path,
                    line=number,
                    hint="for IOB1 files (I- starts entities) set task.scheme=iob1",
                )
        if not tokens:
            first = number
        tokens.append(fields[0])
        tags.append(tag)
    close()
    if not sentences:
        raise DataError("no sentences", path=path, hint="is this a CoNLL-format file?")
    return sentences


def locate_conll2003(data_dir: str | Path | None) -> Path:
    """The folder holding train/valid/test.txt.gz: ``data_dir/conll2003`` or ``data_dir``."""
    if data_dir is None:
        raise DataError(
            "no data folder for CoNLL-2003",
            hint="pass data_dir (the folder holding conll2003/), or use task.data=files "
            "with train_path/valid_path/test_path",
        )
    root = Path(data_dir)
    for folder in (root / "conll2003", root):
        if all((folder / name).is_file() for name in CONLL2003_FILES.values()):
            return folder
    names = ", ".join(CONLL2003_FILES.values())
    raise DataError(
        f"CoNLL-2003 files ({names}) not found",
        path=root / "conll2003",
        hint="CoNLL-2003 is licensed (Reuters RCV1) and not shipped: put the three files "
        "there, or use task.data=files",
    )
