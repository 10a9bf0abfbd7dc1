"""Data: validated readers, vocabularies and tokenizers (batching lives in ``batching.py``).

- :mod:`seqlab.data.readers` — ``read_lines``, ``read_parallel``, ``read_labelled``,
  ``read_polarity``, ``read_conll``, ``read_char_stream``, ``read_word_stream``; each raises
  :class:`seqlab.errors.DataError` (``path:line: problem — fix``) on bad input.
- :mod:`seqlab.data.vocab` — ``Vocab`` with ``<pad>``=0, ``<unk>``=1, ``<s>``=2, ``</s>``=3.
- :mod:`seqlab.data.tokenizers` / :mod:`seqlab.data.spm` — ``CharTokenizer``,
  ``WordTokenizer``, ``SentencePieceTokenizer`` behind one ``Tokenizer`` interface.

User guide: docs/data.md.
"""

from seqlab.data.readers import (
    ParallelPairs,
    Sentence,
    read_char_stream,
    read_conll,
    read_labelled,
    read_lines,
    read_parallel,
    read_polarity,
    read_word_stream,
)
from seqlab.data.spm import SentencePieceTokenizer
from seqlab.data.tokenizers import UNK_SURFACE, CharTokenizer, Tokenizer, WordTokenizer
from seqlab.data.vocab import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    SPECIALS,
    UNK,
    UNK_ID,
    Vocab,
)

__all__ = [
    "BOS",
    "BOS_ID",
    "EOS",
    "EOS_ID",
    "PAD",
    "PAD_ID",
    "SPECIALS",
    "UNK",
    "UNK_ID",
    "UNK_SURFACE",
    "CharTokenizer",
    "ParallelPairs",
    "Sentence",
    "SentencePieceTokenizer",
    "Tokenizer",
    "Vocab",
    "WordTokenizer",
    "read_char_stream",
    "read_conll",
    "read_labelled",
    "read_lines",
    "read_parallel",
    "read_polarity",
    "read_word_stream",
]
