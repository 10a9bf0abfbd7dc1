"""Tokenizers: one small interface, three implementations (char, word, sentencepiece).

All tokenizers share the special ids of :mod:`seqlab.data.vocab` (``<pad>``=0, ``<unk>``=1,
``<s>``=2, ``</s>``=3) and serialise to a JSON-compatible dict (``to_state``) that a
checkpoint stores next to the weights, so a checkpoint always carries its tokenizer.
``Tokenizer.from_state`` / ``Tokenizer.load`` rebuild the right class from the ``kind``
field. :class:`~seqlab.data.spm.SentencePieceTokenizer` lives in ``seqlab/data/spm.py``.

``decode`` drops ``<pad> <s> </s>`` and renders ``<unk>`` as ``⁇`` (U+2047, the mark
sentencepiece uses), so lost content stays visible in the output.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from seqlab.atomic_file import write_atomic
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from seqlab.errors import DataError

__all__ = ["UNK_SURFACE", "CharTokenizer", "Tokenizer", "WordTokenizer"]

UNK_SURFACE = "⁇"
_FORMAT, _VERSION = "seqlab.tokenizer", 1


class Tokenizer(ABC):
    """Text ↔ ids. Subclasses set ``kind`` and implement the abstract methods."""

    kind: ClassVar[str]
    pad_id: ClassVar[int] = PAD_ID
    unk_id: ClassVar[int] = UNK_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included (``V``)."""

    @abstractmethod
    def pieces(self, text: str) -> list[str]:
        """The surface pieces ``text`` is cut into (unknown pieces as they appear in text)."""

    @abstractmethod
    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Ids of ``text``, optionally wrapped in ``<s> … </s>``."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` with ``<pad> <s> </s>`` dropped and ``<unk>`` shown as ``⁇``."""

    @abstractmethod
    def id_to_piece(self, i: int) -> str:
        """The piece with id ``i`` (specials by their names, e.g. ``"</s>"``)."""

    @abstractmethod
    def _payload(self) -> dict[str, Any]:
        """Kind-specific JSON-serialisable fields of :meth:`to_state`."""

    @classmethod
    @abstractmethod
    def _from_payload(cls, state: dict[str, Any]) -> Tokenizer:
        """Inverse of :meth:`_payload`."""

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable state (binary models base64-encoded)."""
        return {"format": _FORMAT, "version": _VERSION, "kind": self.kind, **self._payload()}

    @staticmethod
    def from_state(state: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer of any kind from :meth:`to_state` output."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise DataError(
                "not a seqlab tokenizer state (missing format='seqlab.tokenizer')",
                hint="pass the dict written by Tokenizer.to_state()",
            )
        if state.get("version") != _VERSION:
            raise DataError(
                f"tokenizer format version {state.get('version')!r} is not supported "
                f"(this seqlab reads version {_VERSION})",
                hint="upgrade seqlab or re-train the tokenizer",
            )
        kinds = _kinds()
        kind = state.get("kind")
        if kind not in kinds:
            raise DataError(
                f"unknown tokenizer kind {kind!r}", hint=f"known kinds: {', '.join(sorted(kinds))}"
            )
        return kinds[kind]._from_payload(state)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_state` as JSON (atomically: temp file, then rename)."""
        path = Path(path)
        write_atomic(path, json.dumps(self.to_state(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Read a file written by :meth:`save`; ``CharTokenizer.load`` also checks the kind."""
        path = Path(path)
        if not path.is_file():
            raise DataError("tokenizer file not found", path=path, hint="check the path")
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(
                f"invalid JSON: {e.msg}",
                path=path,
                line=e.lineno,
                hint="the file is damaged; save the tokenizer again",
            ) from e
        except UnicodeDecodeError as e:
            raise DataError("not UTF-8 JSON", path=path, hint="save the tokenizer again") from e
        try:
            tok = Tokenizer.from_state(state)
        except DataError as e:
            raise with_path(e, path) from e
        if cls is not Tokenizer and not isinstance(tok, cls):
            raise DataError(
                f"holds a {tok.kind!r} tokenizer, not {cls.kind!r}",
                path=path,
                hint="load it with Tokenizer.load, which accepts every kind",
            )
        return tok

    def _check_ids(self, ids: Iterable[int]) -> list[int]:
        out = [int(i) for i in ids]
        for i in out:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} out of range for a vocabulary of {self.vocab_size}")
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class _VocabTokenizer(Tokenizer):
    """Shared code of the tokenizers that cut text into pieces and look them up in a Vocab."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return self.vocab.encode(self.pieces(text), add_bos=add_bos, add_eos=add_eos)

    def id_to_piece(self, i: int) -> str:
        return self.vocab.id_to_token(i)

    def _surface(self, ids: Iterable[int]) -> list[str]:
        keep = [i for i in self._check_ids(ids) if i not in (PAD_ID, BOS_ID, EOS_ID)]
        return [UNK_SURFACE if i == UNK_ID else self.vocab.id_to_token(i) for i in keep]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_state() == self.to_state()


class CharTokenizer(_VocabTokenizer):
    """One id per character (Unicode code point); ``decode(encode(t)) == t`` whenever every
    character of ``t`` is in the vocabulary. Newlines and spaces are ordinary characters."""

    kind = "char"

    @classmethod
    def train(
        cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None
    ) -> CharTokenizer:
        """Vocabulary of the characters seen at least ``min_freq`` times in ``texts``."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(t)
        if not counts:
            raise DataError("no characters to train on", hint="pass non-empty texts")
        return cls(Vocab.from_counts(counts, min_freq=min_freq, max_size=max_size))

    def pieces(self, text: str) -> list[str]:
        return list(text)

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self._surface(ids))

    def _payload(self) -> dict[str, Any]:
        return {"vocab": self.vocab.to_dict()}

    @classmethod
    def _from_payload(cls, state: dict[str, Any]) -> CharTokenizer:
        return cls(Vocab.from_dict(state.get("vocab")))


class WordTokenizer(_VocabTokenizer):
    """Whitespace-separated words; ``decode`` joins words by one space. With ``lowercase``
    text is lower-cased before lookup (and decoded text stays lower-case)."""

    kind = "word"

    def __init__(self, vocab: Vocab, lowercase: bool = False) -> None:
        super().__init__(vocab)
        self.lowercase = lowercase

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        min_freq: int = 2,
        lowercase: bool = False,
        max_size: int | None = None,
    ) -> WordTokenizer:
        """Vocabulary of the words seen at least ``min_freq`` times (default 2, so words
        seen once become ``<unk>`` and the model learns an ``<unk>`` embedding)."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(t.lower().split() if lowercase else t.split())
        if not counts:
            raise DataError("no words to train on", hint="pass non-empty texts")
        return cls(Vocab.from_counts(counts, min_freq, max_size), lowercase=lowercase)

    def pieces(self, text: str) -> list[str]:
        return (text.lower() if self.lowercase else text).split()

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self._surface(ids))

    def _payload(self) -> dict[str, Any]:
        return {"lowercase": self.lowercase, "vocab": self.vocab.to_dict()}

    @classmethod
    def _from_payload(cls, state: dict[str, Any]) -> WordTokenizer:
        return cls(Vocab.from_dict(state.get("vocab")), lowercase=bool(state.get("lowercase")))


def with_path(err: DataError, path: str | Path) -> DataError:
    """The same error, now naming the file it came from."""
    text = str(err)
    if err.hint:
        text = text.removesuffix(f" — {err.hint}")
    return DataError(text, path=path, line=err.line, hint=err.hint)


def _kinds() -> dict[str, type[Tokenizer]]:
    """kind → class. sentencepiece is imported here, lazily, to keep this module light."""
    from seqlab.data.spm import SentencePieceTokenizer

    classes: Sequence[type[Tokenizer]] = (CharTokenizer, WordTokenizer, SentencePieceTokenizer)
    return {c.kind: c for c in classes}
