"""Validated readers for the text formats seqlab trains on.

Every reader checks its file up front and raises :class:`seqlab.errors.DataError`, whose
message reads ``path:line: what is wrong — what to do``. Files ending in ``.gz`` are
decompressed transparently; everything else is read as plain text.

Conventions shared by all readers:

- Text is decoded strictly (default UTF-8; a UTF-8 byte-order mark is dropped). An invalid
  byte is reported with its line number and byte offset (offsets count bytes of the
  *decompressed* content for ``.gz`` files). Pass ``encoding=`` for other encodings, e.g.
  ``"cp1252"`` for the MR polarity files.
- Lines are split on ``"\\n"`` only (never on U+0085/U+2028, which ``str.splitlines`` treats
  as breaks) and trailing whitespace, ``"\\r"`` included, is stripped from each line.
- Line numbers are 1-based, as in editors and ``sed -n 12p``.
"""

from __future__ import annotations

import codecs
import gzip
import logging
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from seqlab.errors import DataError

__all__ = [
    "ParallelPairs",
    "Sentence",
    "read_char_stream",
    "read_conll",
    "read_labelled",
    "read_lines",
    "read_parallel",
    "read_polarity",
    "read_word_stream",
    "resolve_path",
]

log = logging.getLogger("seqlab.data")

Sentence = dict[str, list[str]]
"""One CoNLL sentence: column name → one value per token, ``{"token": [...], "ner": [...]}``."""

_SHOW = 5  # how many offending line numbers a message lists


def resolve_path(name: str, data_dir: str | Path | None) -> Path:
    """A configured input file: as given (``~`` expanded) when it exists, else under the data
    folder when it is there, else as given (so the reader's "not found" names it)."""
    path = Path(name).expanduser()
    if not path.exists() and not path.is_absolute() and data_dir is not None:
        inside = Path(data_dir) / path
        if inside.exists():
            return inside
    return path


def _read_bytes(path: str | Path) -> bytes:
    """Raw (decompressed for ``.gz``) bytes of a non-empty file."""
    p = Path(path)
    if not p.exists():
        raise DataError(
            "file not found",
            path=p,
            hint=f"check the path (relative paths start at {Path.cwd()}); "
            "the shared datasets are described in shared/data/README.md",
        )
    if p.is_dir():
        raise DataError("is a directory, expected a file", path=p, hint="name a file inside it")
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                data = f.read()
        else:
            data = p.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(
            f"not a valid gzip file ({e})",
            path=p,
            hint="re-compress it with `gzip -k FILE`, or rename it without .gz if it is plain text",
        ) from e
    except OSError as e:
        raise DataError(f"cannot read: {e.strerror}", path=p, hint="check its permissions") from e
    if not data:
        raise DataError("file is empty", path=p, hint="point to the file that holds the data")
    return data


def _decode(data: bytes, path: str | Path, encoding: str) -> str:
    """Strictly decode ``data``; on failure name line, byte offset and a fix."""
    try:
        codec = codecs.lookup(encoding).name
    except LookupError as e:
        raise DataError(
            f"unknown encoding {encoding!r}",
            path=path,
            hint="use a Python codec name such as 'utf-8', 'cp1252' or 'latin-1'",
        ) from e
    if codec == "utf-8" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode(codec)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        if codec == "utf-8":
            hint = (
                "the file is not UTF-8: re-encode it (e.g. `iconv -f cp1252 -t utf-8 IN > OUT`) "
                "or pass encoding= with its real encoding (e.g. encoding='cp1252')"
            )
        else:
            hint = f"this byte is not valid {codec}; pass the file's real encoding= instead"
        raise DataError(
            f"invalid {codec} byte 0x{data[e.start]:02x} at byte offset {e.start} "
            f"(column {column})",
            path=path,
            line=line,
            hint=hint,
        ) from e


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":  # the file ended with "\n": no line after it
        lines.pop()
    return [line.rstrip() for line in lines]


def _list(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:_SHOW])
    return shown + (", …" if len(numbers) > _SHOW else "")


def read_lines(
    path: str | Path, *, encoding: str = "utf-8", allow_empty_lines: bool = False
) -> list[str]:
    """Read a text file (plain or ``.gz``) as a list of lines without trailing whitespace.

    Raises DataError for a missing, unreadable or empty file, a byte that is not valid in
    ``encoding`` (with line and byte offset), and — unless ``allow_empty_lines`` — an empty
    (or whitespace-only) line, naming the first ones.
    """
    lines = _split_lines(_decode(_read_bytes(path), path, encoding))
    if not allow_empty_lines:
        empty = [i for i, line in enumerate(lines, 1) if not line]
        if empty:
            raise DataError(
                f"empty line ({len(empty)} empty lines in all, at lines {_list(empty)})",
                path=path,
                line=empty[0],
                hint="remove empty lines (e.g. `sed -i '/^[[:space:]]*$/d' FILE`) "
                "or pass allow_empty_lines=True",
            )
    return lines


class ParallelPairs(list):
    """The ``(source, target)`` pairs of :func:`read_parallel`: a plain ``list`` that also
    records in ``dropped`` the 1-based line numbers skipped by ``drop_empty=True``."""

    def __init__(self, pairs: list[tuple[str, str]], dropped: list[int]) -> None:
        super().__init__(pairs)
        self.dropped = dropped


def read_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    *,
    encoding: str = "utf-8",
    drop_empty: bool = False,
) -> ParallelPairs:
    """Read two line-aligned files into ``(source, target)`` pairs.

    Both files must have the same number of lines (the error names both files and both
    counts). A pair whose source or target line is empty is an error naming the file and
    line; with ``drop_empty=True`` such pairs are skipped instead, their line numbers kept
    in ``result.dropped`` and their count logged.
    """
    src = read_lines(src_path, encoding=encoding, allow_empty_lines=True)
    tgt = read_lines(tgt_path, encoding=encoding, allow_empty_lines=True)
    if len(src) != len(tgt):
        (long_path, n_long), (short_path, n_short) = sorted(
            [(src_path, len(src)), (tgt_path, len(tgt))], key=lambda pc: -pc[1]
        )
        raise DataError(
            f"{n_long} lines here but {n_short} lines in {short_path}; "
            f"line {n_short + 1} has no counterpart",
            path=long_path,
            line=n_short + 1,
            hint="parallel files must be line-aligned (line i of one translates line i of the "
            "other): check that neither was truncated or has extra lines (`wc -l` both)",
        )
    pairs: list[tuple[str, str]] = []
    dropped: list[int] = []
    for i, (s, t) in enumerate(zip(src, tgt), 1):
        if s and t:
            pairs.append((s, t))
            continue
        if not drop_empty:
            path, other, other_text = (src_path, tgt_path, t) if not s else (tgt_path, src_path, s)
            raise DataError(
                f"empty line in a parallel corpus (line {i} of {other} is {other_text!r})",
                path=path,
                line=i,
                hint=f"delete line {i} from BOTH files to keep them aligned, "
                "or pass drop_empty=True to skip pairs with an empty side",
            )
        dropped.append(i)
    if dropped:
        log.warning(
            "%s / %s: dropped %d pairs with an empty side (lines %s)",
            src_path,
            tgt_path,
            len(dropped),
            _list(dropped),
        )
    if not pairs:
        raise DataError("no non-empty pairs", path=src_path, hint="check both files")
    return ParallelPairs(pairs, dropped)


def read_labelled(
    path: str | Path,
    format: Literal["tsv", "label_first"],
    *,
    encoding: str = "utf-8",
    header: bool = False,
) -> list[tuple[str, str]]:
    """Read a classification file as ``(text, label)`` pairs.

    Formats:
      ``"tsv"``          ``text<TAB>label`` — exactly one TAB per line (GLUE SST-2 style).
      ``"label_first"``  ``label text…`` — the first whitespace-separated field is the label,
                         the rest of the line the text (TREC, fastText ``__label__x`` style).
    ``header=True`` skips the first line. Empty lines are errors.
    """
    if format not in ("tsv", "label_first"):
        raise ValueError(f"format must be 'tsv' or 'label_first', got {format!r}")
    lines = read_lines(path, encoding=encoding)
    start = 2 if header else 1
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines[start - 1 :], start):
        if format == "tsv":
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(
                    f"found {len(fields)} TAB-separated fields, expected 2 (text, label)",
                    path=path,
                    line=i,
                    hint="write each line as `text<TAB>label` with exactly one TAB "
                    "(replace TABs inside the text by spaces)",
                )
            text, label = fields[0].strip(), fields[1].strip()
        else:
            fields = line.split(maxsplit=1)
            label, text = fields[0], fields[1] if len(fields) == 2 else ""
        if not text or not label:
            raise DataError(
                f"{'text' if not text else 'label'} is empty",
                path=path,
                line=i,
                hint="every line needs both a text and a label "
                + ("(`text<TAB>label`)" if format == "tsv" else "(`label text…`)"),
            )
        out.append((text, label))
    if not out:
        raise DataError("no examples after the header", path=path, hint="check header=")
    return out


def read_polarity(
    pos_path: str | Path, neg_path: str | Path, *, encoding: str = "cp1252"
) -> list[tuple[str, str]]:
    """Read the MR sentence-polarity files (Pang & Lee 2005) as ``(text, label)`` pairs.

    Returns every positive line (label ``"pos"``) followed by every negative line (label
    ``"neg"``), trailing spaces stripped; shuffle or split them yourself. The original
    ``rt-polarity.*`` files are **not UTF-8** but Windows-1252, hence the default
    ``encoding="cp1252"`` (0x85 → "…", 0x91 → "‘", 0x96 → "–", 0x97 → "—"). Lines are split
    on ``"\\n"`` only, so the latin-1 NEL pitfall cannot occur. Pass ``encoding="utf-8"`` for
    re-encoded copies.
    """
    pos = read_lines(pos_path, encoding=encoding)
    neg = read_lines(neg_path, encoding=encoding)
    return [(t, "pos") for t in pos] + [(t, "neg") for t in neg]


def read_conll(
    path: str | Path,
    columns: Sequence[str] = ("token", "pos", "chunk", "ner"),
    *,
    encoding: str = "utf-8",
) -> list[Sentence]:
    """Read a CoNLL file (one token per line, space-separated columns, blank line between
    sentences) into sentences, each a dict ``column → list of values``.

    ``-DOCSTART-`` lines and the blank line after them are skipped; runs of blank lines
    count as one separator. Every token line must have exactly ``len(columns)`` fields.
    """
    columns = tuple(columns)
    if not columns or len(set(columns)) != len(columns):
        raise ValueError(f"columns must be non-empty and unique, got {columns!r}")
    sentences: list[Sentence] = []
    current: list[list[str]] = []

    def flush() -> None:
        if current:
            sentences.append({c: [row[k] for row in current] for k, c in enumerate(columns)})
            current.clear()

    for i, line in enumerate(read_lines(path, encoding=encoding, allow_empty_lines=True), 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":  # sentence or document boundary
            flush()
        elif len(fields) != len(columns):
            raise DataError(
                f"found {len(fields)} columns, expected {len(columns)} ({' '.join(columns)})",
                path=path,
                line=i,
                hint="each token line needs one space-separated value per column; pass "
                "columns=(...) matching the file, e.g. columns=('token', 'ner')",
            )
        else:
            current.append(fields)
    flush()
    if not sentences:
        raise DataError("no sentences found", path=path, hint="is this a CoNLL file?")
    return sentences


def read_char_stream(path: str | Path, *, encoding: str = "utf-8") -> str:
    """The whole file as one string, exactly as stored (newlines kept), for char-level LMs."""
    return _decode(_read_bytes(path), path, encoding)


def read_word_stream(
    path: str | Path,
    eos: str | None = "</s>",
    *,
    encoding: str = "utf-8",
    allow_empty_lines: bool = False,
) -> list[str]:
    """PTB-style word stream: each line's whitespace-separated tokens followed by ``eos``.

    ``eos=None`` appends nothing. The default ``"</s>"`` is :data:`seqlab.data.vocab.EOS`,
    so it encodes to ``EOS_ID``; Mikolov's PTB counts use ``eos="<eos>"``.
    """
    stream: list[str] = []
    for line in read_lines(path, encoding=encoding, allow_empty_lines=allow_empty_lines):
        stream.extend(line.split())
        if eos is not None:
            stream.append(eos)
    return stream
