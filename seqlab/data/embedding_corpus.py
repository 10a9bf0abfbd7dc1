"""The training text for word embeddings: sentences of lower-cased word tokens → ids.

Sources (``../shared/data``, described in its README):

- PTB train (Mikolov's LM version): already tokenised and lower-cased; its ``<unk>``
  stays ``<unk>`` (a special, so never in the vocabulary) and its number token ``N``
  becomes ``<num>``.
- Multi30k English train (UTF-8, raw captions) and MR sentence polarity (cp1252, already
  lower-cased and tokenised): tokenised by :func:`tokenize_words`.
- Optionally (``conll``, not in the default :data:`SOURCES`) the words of the CoNLL-2003
  **train** split (Reuters news, ~200k tokens), read by the validated CoNLL reader; the
  valid and test splits are never read, so vectors trained on it can initialise a tagger
  evaluated on them.

About 1.5 million tokens in all (~0.2 million more with ``conll``). :func:`build_corpus`
keeps words seen at least ``min_count`` times (most frequent first, ties by string:
``Vocab.from_counts``) and encodes every sentence, **dropping** out-of-vocabulary tokens
before any window is taken, as word2vec does. Windows never cross a sentence boundary
(GloVe's ``cooccur`` and word2vec both restart at a line break).

:func:`planted_corpus` generates a tiny corpus with a known analogy structure for tests.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from seqlab.data.readers import read_lines
from seqlab.data.vocab import Vocab
from seqlab.errors import DataError

__all__ = [
    "NUM",
    "NUMBER_RE",
    "ALL_SOURCES",
    "SOURCES",
    "EmbeddingCorpus",
    "build_corpus",
    "corpus_spelling",
    "planted_corpus",
    "read_embedding_sentences",
    "read_text_sentences",
    "tokenize_words",
]

Source = Literal["ptb", "multi30k", "mr", "conll"]
SOURCES: tuple[Source, ...] = ("ptb", "multi30k", "mr")  # the default corpus
ALL_SOURCES: tuple[Source, ...] = (*SOURCES, "conll")
NUM = "<num>"

# A number (1,000 or 3.5), or a word: letters/digits with inner hyphens; PTB-style clitics
# split off ("don't" → do n't, "century's" → century 's). Punctuation is dropped, as in PTB.
_WORD = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?=n't)|n't|'[^\W_]+|[^\W_]+(?:-[^\W_]+)*")
NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_QUOTES = str.maketrans({"’": "'", "‘": "'", "`": "'"})


def tokenize_words(text: str) -> list[str]:
    """Lower-cased word tokens, punctuation dropped, numbers → ``<num>``.

    >>> tokenize_words("Two young, White males don't see 3 dogs' bowls.")
    ['two', 'young', 'white', 'males', 'do', "n't", 'see', '<num>', 'dogs', 'bowls']
    """
    words = _WORD.findall(text.lower().translate(_QUOTES))
    return [NUM if NUMBER_RE.fullmatch(w) else w for w in words]


def corpus_spelling(token: str) -> str:
    """How this corpus (and a vector file trained on it) spells ``token``: ``<num>`` for a
    number such as ``1,000``, else lower case. ``corpus_spelling("Paris") == "paris"``."""
    return NUM if NUMBER_RE.fullmatch(token) else token.lower()


def _ptb_sentences(path: Path) -> list[list[str]]:
    return [[NUM if w == "N" else w for w in line.split()] for line in read_lines(path)]


def read_text_sentences(path: str | Path, *, encoding: str = "utf-8") -> list[list[str]]:
    """Any text file (plain or ``.gz``): one sentence per non-empty line, :func:`tokenize_words`."""
    lines = read_lines(path, encoding=encoding, allow_empty_lines=True)
    sentences = [s for s in map(tokenize_words, lines) if s]
    if not sentences:
        raise DataError("no words found", path=path, hint="give a text file with words in it")
    return sentences


def read_embedding_sentences(
    data_dir: str | Path, sources: Sequence[Source] = SOURCES
) -> list[list[str]]:
    """The sentences of ``sources`` under ``data_dir`` (PTB train, Multi30k en train, MR,
    optionally CoNLL-2003 train)."""
    root = Path(data_dir)
    unknown = [s for s in sources if s not in ALL_SOURCES]
    if unknown or not sources:
        raise DataError(
            f"unknown corpus source(s) {unknown}", hint=f"choose from {', '.join(ALL_SOURCES)}"
        )
    out: list[list[str]] = []
    for source in sources:
        if source == "ptb":
            out += _ptb_sentences(root / "ptb" / "ptb.train.txt.gz")
        elif source == "conll":  # the train split only: valid/test stay unseen
            from seqlab.data.conll import CONLL2003_FILES, locate_conll2003, read_conll

            path = locate_conll2003(root) / CONLL2003_FILES["train"]
            found = (tokenize_words(" ".join(s.tokens)) for s in read_conll(path, n_columns=4))
            out += [s for s in found if s]
        elif source == "multi30k":
            out += read_text_sentences(root / "multi30k" / "task1" / "raw" / "train.en.gz")
        else:  # MR is Windows-1252 (shared/data/README.md §3)
            for name in ("rt-polarity.pos", "rt-polarity.neg"):
                out += read_text_sentences(root / "mr_polarity" / name, encoding="cp1252")
    return out


@dataclass
class EmbeddingCorpus:
    """A tokenised corpus as one id stream.

    ``words[i]`` is word ``i`` (most frequent first), ``counts[i]`` its count; ``ids`` is
    the concatenation of all sentences (out-of-vocabulary tokens removed) and
    ``sentence[n]`` the sentence index of token ``n``, so two tokens may share a window
    only when their ``sentence`` values are equal.

    Shapes:
        counts: (V,) long   ids: (N,) long   sentence: (N,) long
    """

    words: list[str]
    counts: Tensor
    ids: Tensor
    sentence: Tensor

    @property
    def V(self) -> int:
        return len(self.words)

    @property
    def n_tokens(self) -> int:
        return int(self.ids.numel())


def build_corpus(
    sentences: Iterable[Sequence[str]], min_count: int = 5, max_vocab: int | None = None
) -> EmbeddingCorpus:
    """Count words, keep those seen ``min_count`` times (at most ``max_vocab``), encode."""
    sentences = [list(s) for s in sentences]
    counts: Counter[str] = Counter()
    for s in sentences:
        counts.update(s)
    max_size = None if max_vocab is None else max_vocab + 4
    words = Vocab.from_counts(counts, min_freq=min_count, max_size=max_size).tokens[4:]
    if len(words) < 2:
        raise DataError(
            f"only {len(words)} words occur at least {min_count} times",
            hint="use a larger text or a smaller --min-count",
        )
    index = {w: i for i, w in enumerate(words)}
    ids: list[int] = []
    sent: list[int] = []
    for k, s in enumerate(sentences):
        kept = [index[w] for w in s if w in index]
        ids += kept
        sent += [k] * len(kept)
    return EmbeddingCorpus(
        words=words,
        counts=torch.tensor([counts[w] for w in words], dtype=torch.long),  # (V,)
        ids=torch.tensor(ids, dtype=torch.long),  # (N,)
        sentence=torch.tensor(sent, dtype=torch.long),  # (N,)
    )


def planted_corpus(
    n_sentences: int = 3000, n_rows: int = 4, seed: int = 0
) -> tuple[list[list[str]], list[tuple[str, str, str, str]]]:
    """Sentences with a planted analogy structure, and the analogy questions it solves.

    Entities ``e{x}{y}`` for x < ``n_rows`` ("country") and y ∈ {0, 1} ("capital" or
    "language" side) each occur with context words of their x (``cx{x}k*``) and of their
    y (``cy{y}k*``). So e{x}0 : e{x}1 :: e{x'}0 : e{x'}1 for every x ≠ x' (the
    king:queen::man:woman pattern). One entity per sentence, two x and two y context
    words, and one context word drawn from all of them (so that non-matching pairs also
    co-occur, less often: GloVe fits only non-zero counts), shuffled.
    """
    rng = random.Random(seed)
    ctx_x = {x: [f"cx{x}k{k}" for k in range(3)] for x in range(n_rows)}
    ctx_y = {y: [f"cy{y}k{k}" for k in range(3)] for y in range(2)}
    every = [w for ws in (*ctx_x.values(), *ctx_y.values()) for w in ws]
    sentences = []
    for _ in range(n_sentences):
        x, y = rng.randrange(n_rows), rng.randrange(2)
        words = [f"e{x}{y}", *rng.choices(ctx_x[x], k=2), *rng.choices(ctx_y[y], k=2)]
        words.append(rng.choice(every))  # background: every pair co-occurs a little
        rng.shuffle(words)
        sentences.append(words)
    questions = [
        (f"e{x}0", f"e{x}1", f"e{z}0", f"e{z}1")
        for x in range(n_rows)
        for z in range(n_rows)
        if x != z
    ]
    return sentences, questions
