"""Word vectors in word2vec's text format, and initialising an Embedding layer from them.

The format (Mikolov's ``word2vec -binary 0``, read by gensim's ``load_word2vec_format``):

    V D                      header: number of words, dimension
    word x_1 x_2 … x_D       one line per word, V lines, space-separated

seqlab writes words most frequent first (the order of the training vocabulary), so the
first N lines of a file are its N most frequent words. Reading validates the header and
every line and raises :class:`seqlab.errors.DataError` naming ``file:line``. Files ending
in ``.gz`` are decompressed transparently (:func:`seqlab.data.readers.read_lines`).

:func:`init_embedding` copies the vectors of a file into any module with a ``weight`` of
shape (V, D) (``seqlab.nn.embedding.Embedding``, ``nn.Embedding``), row ``i`` getting the
vector of the vocabulary's token ``i``, and returns the coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from seqlab.data.embedding_corpus import corpus_spelling
from seqlab.data.readers import read_lines
from seqlab.data.vocab import SPECIALS, Vocab
from seqlab.errors import DataError

__all__ = [
    "TrainedVectors",
    "WordVectors",
    "init_embedding",
    "load_word2vec_text",
    "save_word2vec_text",
]


@dataclass
class WordVectors:
    """Words and their vectors: row ``i`` of ``vectors`` (V, D) is the vector of ``words[i]``.

    Shapes:
        vectors: (V, D) float32
    """

    words: list[str]
    vectors: Tensor

    def __post_init__(self) -> None:
        if self.vectors.dim() != 2 or self.vectors.shape[0] != len(self.words):
            raise ValueError(
                f"vectors must be (V, D) with V = {len(self.words)} words, "
                f"got {tuple(self.vectors.shape)}"
            )
        self.index: dict[str, int] = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("duplicate words in WordVectors")

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> Tensor:
        return self.vectors[self.index[word]]  # (D,)

    def normalized(self) -> Tensor:
        """Rows scaled to unit L2 norm (zero rows stay zero), for cosine similarities.

        Shapes:
            returns: (V, D)
        """
        return torch.nn.functional.normalize(self.vectors.float(), dim=1)  # (V, D)


@dataclass
class TrainedVectors:
    """What a trainer returns: the vectors, the epochs done (fractional when a time budget
    stopped it mid-epoch), the wall-clock seconds and the mean loss of each epoch."""

    vectors: WordVectors
    epochs: float
    seconds: float
    losses: list[float]


def save_word2vec_text(wv: WordVectors, path: str | Path) -> None:
    """Write ``wv`` in word2vec text format. Values are written with ``%.9g``, which reads
    back to the identical float32 (the round trip is exact)."""
    bad = [w for w in wv.words if not w or any(c.isspace() for c in w)]
    if bad:
        raise DataError(
            f"word {bad[0]!r} is empty or contains whitespace ({len(bad)} such words)",
            path=path,
            hint="the word2vec text format separates fields by spaces; rename those words",
        )
    rows = wv.vectors.detach().float().cpu().tolist()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"{len(wv.words)} {wv.dim}\n")
        for word, row in zip(wv.words, rows):
            f.write(word + " " + " ".join(f"{x:.9g}" for x in row) + "\n")
    tmp.replace(p)


def _header(line: str, path: str | Path) -> tuple[int, int]:
    fields = line.split()
    hint = "the first line must be 'V D': the number of words and the vector dimension"
    if len(fields) != 2:
        raise DataError(
            f"header has {len(fields)} fields, expected 2", path=path, line=1, hint=hint
        )
    try:
        V, D = int(fields[0]), int(fields[1])
    except ValueError:
        raise DataError(
            f"header {line!r} is not two integers", path=path, line=1, hint=hint
        ) from None
    if V < 1 or D < 1:
        raise DataError(f"header {line!r}: V and D must be >= 1", path=path, line=1, hint=hint)
    return V, D


def load_word2vec_text(path: str | Path, *, encoding: str = "utf-8") -> WordVectors:
    """Read a word2vec text file, validating the header and every line.

    Each line must hold a word and exactly D finite numbers; words must be unique; the file
    must have exactly V lines after the header. Errors name ``file:line`` and the fix.
    """
    lines = read_lines(path, encoding=encoding)
    V, D = _header(lines[0], path)
    body = lines[1:]
    if len(body) != V:
        raise DataError(
            f"header says {V} words but the file has {len(body)} vector lines",
            path=path,
            line=V + 2 if len(body) > V else None,
            hint="fix the header's first number or the file was truncated; re-export it",
        )
    words: list[str] = []
    seen: dict[str, int] = {}
    values = torch.empty(V, D)  # (V, D)
    for i, line in enumerate(body):
        n = i + 2  # 1-based file line
        fields = line.split(" ")
        if len(fields) != D + 1:
            raise DataError(
                f"found {len(fields) - 1} values, expected {D} (the header's dimension)",
                path=path,
                line=n,
                hint="each line is 'word x_1 … x_D' separated by single spaces",
            )
        word = fields[0]
        if not word:
            raise DataError("empty word", path=path, line=n, hint="the line starts with a space")
        if word in seen:
            raise DataError(
                f"duplicate word {word!r} (first on line {seen[word]})",
                path=path,
                line=n,
                hint="each word may appear once",
            )
        seen[word] = n
        try:
            row = [float(x) for x in fields[1:]]
        except ValueError:
            bad = next(x for x in fields[1:] if not _is_float(x))
            raise DataError(
                f"value {bad!r} for word {word!r} is not a number",
                path=path,
                line=n,
                hint="vector components must be decimal numbers",
            ) from None
        if not all(math.isfinite(x) for x in row):
            raise DataError(
                f"non-finite value (nan/inf) in the vector of {word!r}",
                path=path,
                line=n,
                hint="re-train or drop this word",
            )
        words.append(word)
        values[i] = torch.tensor(row)
    return WordVectors(words, values)


def _is_float(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


def init_embedding(
    embedding_module: nn.Module,
    vocab: Vocab | Sequence[str],
    path: str | Path | WordVectors,
    *,
    lowercase_fallback: bool = True,
) -> float:
    """Copy pretrained vectors into ``embedding_module.weight`` (V, D); return the coverage.

    Row ``i`` receives the vector of the vocabulary's token ``i`` when the file has it (else,
    with ``lowercase_fallback``, the vector of its lower-cased form, or of ``<num>`` for a
    number such as ``1,000`` or ``0000``, as seqlab's embedding corpus spells them); other
    rows keep their initial values. The special tokens (``<pad> <unk> <s> </s>``) are never
    overwritten, so the padding row stays zero. Coverage = found tokens / non-special tokens.

    Deviations: the pretrained vectors are copied as they are (not rescaled to the layer's
    ``init_std``); with ``Embedding(scale=True)`` they are also multiplied by √D.
    """
    tokens = vocab.tokens if isinstance(vocab, Vocab) else list(vocab)
    wv = path if isinstance(path, WordVectors) else load_word2vec_text(path)
    weight = getattr(embedding_module, "weight", None)
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise TypeError("embedding_module must have a 2-d .weight (V, D)")
    if weight.shape[0] != len(tokens):
        raise ValueError(f"weight has {weight.shape[0]} rows but the vocabulary {len(tokens)}")
    if weight.shape[1] != wv.dim:
        where = None if isinstance(path, WordVectors) else path
        raise DataError(
            f"vectors have dimension {wv.dim} but the embedding layer {weight.shape[1]}",
            path=where,
            hint=f"build the embedding with D={wv.dim} or train vectors with --dim "
            f"{weight.shape[1]}",
        )
    rows, sources = [], []
    n_regular = 0
    for i, t in enumerate(tokens):
        if t in SPECIALS:
            continue
        n_regular += 1
        j = wv.index.get(t)
        if j is None and lowercase_fallback:
            j = wv.index.get(corpus_spelling(t))
        if j is not None:
            rows.append(i)
            sources.append(j)
    if rows:
        with torch.no_grad():
            idx = torch.tensor(rows, device=weight.device)  # (n,)
            src = wv.vectors[torch.tensor(sources)].to(weight.device, weight.dtype)  # (n, D)
            weight.index_copy_(0, idx, src)
    return len(rows) / n_regular if n_regular else 0.0
