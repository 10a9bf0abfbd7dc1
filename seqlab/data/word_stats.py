"""Corpus statistics of a source word, as encoder features for copying (not in See et al.).

Whether a pointer-generator should copy a source word it has no target id for depends on
whether the word is *spelled the same in the target language*: a name ("boston"), a
number ("1102"), a borrowed word ("design", "wakeboarder") is copied; a rare German word
("holzbank") is translated. The training corpus says which is which for every word it
contains: a word that occurs in the target-side text about as often as in the source-side
text is a shared spelling. On Multi30k de→en (2,000 target words; docs/pointer-generator.md
§4) a training source word outside the target vocabulary whose target-side count (leave
one out, below) is at least its source-side count is in its reference 80 % of the time;
one that never occurs on the target side, under 5 %.

Each source word w gets F = 3 numbers

    f(w) = [ log(1 + n_tgt(w)),  log(1 + n_src(w)),  1[w contains a digit] ]

n_tgt(w): occurrences of the string w in the training target text; n_src(w): in the
training source text. On a *training* pair the pair's own occurrences are left out
(n_tgt − count in its reference, n_src − count in its source): a word seen only in this
pair then looks as it will at test time (n = 0), instead of "always seen on the target
side" — without leaving it out, every copied hapax would teach the model that a word
with n_tgt > 0 is copied and one with n_tgt = 0 never is, which holds on no test set.
Valid, test and new sentences use the full counts (they are not in the training text).
The digit flag lets numbers, rarely repeated in a corpus, share what is learned about
copying numbers.

The model projects f into the embedding space and adds it to the word's input
(seqlab.models.pointer_generator, ``src_stat_features``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from seqlab.errors import DataError

__all__ = ["N_WORD_STATS", "WordStats"]

N_WORD_STATS = 3  # F: log(1 + n_tgt), log(1 + n_src), digit flag

_FORMAT = "seqlab.word_stats"
_VERSION = 1


class WordStats:
    """Source- and target-side word counts of a training corpus and the features f(w)."""

    def __init__(self, src_counts: Mapping[str, int], tgt_counts: Mapping[str, int]) -> None:
        self.src_counts = Counter(src_counts)
        self.tgt_counts = Counter(tgt_counts)

    @classmethod
    def build(
        cls, src_sentences: Iterable[Sequence[str]], tgt_sentences: Iterable[Sequence[str]]
    ) -> WordStats:
        """Count every word of the (tokenised) training source and target sentences."""
        src = Counter(w for s in src_sentences for w in s)
        tgt = Counter(w for t in tgt_sentences for w in t)
        return cls(src, tgt)

    def features(
        self,
        src_words: Sequence[str],
        own_src: Sequence[str] | None = None,
        own_tgt: Sequence[str] | None = None,
    ) -> tuple[tuple[float, ...], ...]:
        """f(w) for each source word (module docstring), shape (S, F) as nested tuples.

        ``own_src`` / ``own_tgt``: the pair's own source and reference when it is a
        training pair (their occurrences are left out of the counts); None for text that
        is not in the training corpus.
        """
        mine_src = Counter(own_src) if own_src is not None else Counter()
        mine_tgt = Counter(own_tgt) if own_tgt is not None else Counter()
        out = []
        for w in src_words:
            n_tgt = self.tgt_counts[w] - mine_tgt[w]
            n_src = self.src_counts[w] - mine_src[w]
            if n_tgt < 0 or n_src < 0:
                raise DataError(
                    f"word {w!r}: leaving its own pair out gives a negative count "
                    f"(n_tgt {n_tgt}, n_src {n_src}); the pair is not in the counted corpus",
                    hint="pass own_src / own_tgt only for pairs of the training text",
                )
            digit = 1.0 if any(ch.isdigit() for ch in w) else 0.0
            out.append((math.log1p(n_tgt), math.log1p(n_src), digit))
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (saved with a run's vocabularies)."""
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "src": dict(self.src_counts),
            "tgt": dict(self.tgt_counts),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WordStats:
        if not isinstance(d, Mapping) or d.get("format") != _FORMAT:
            raise DataError(
                "not seqlab word statistics (missing format='seqlab.word_stats')",
                hint="pass the dict written by WordStats.to_dict()",
            )
        if d.get("version") != _VERSION:
            raise DataError(
                f"word statistics format version {d.get('version')!r} is not supported "
                f"(this seqlab reads version {_VERSION})",
                hint="upgrade seqlab or train the run again",
            )
        src, tgt = d.get("src"), d.get("tgt")
        for name, counts in (("src", src), ("tgt", tgt)):
            if not isinstance(counts, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in counts.items()
            ):
                raise DataError(
                    f"word statistics field {name!r} must map words to counts >= 0",
                    hint="the saved tokenizer state is damaged; train the run again",
                )
        return cls(src, tgt)  # type: ignore[arg-type]
