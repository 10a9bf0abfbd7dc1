"""Token ↔ id vocabulary with the four special tokens at fixed ids.

Every vocabulary and tokenizer in seqlab uses the same special ids, so padding masks,
BOS-prefixing and EOS-stopping never depend on which tokenizer a model was trained with:

=====  ========  ================================================
id     token     use
=====  ========  ================================================
0      ``<pad>``  padding (``PAD_ID``); masks are ``ids != PAD_ID``
1      ``<unk>``  out-of-vocabulary tokens (``UNK_ID``)
2      ``<s>``    beginning of sequence (``BOS_ID``)
3      ``</s>``   end of sequence (``EOS_ID``)
=====  ========  ================================================

Regular tokens follow from id 4, most frequent first, ties broken by the token's string
order, so the same counts always give the same ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from seqlab.errors import DataError

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
    "Vocab",
]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)

_FORMAT, _VERSION = "seqlab.vocab", 1


class Vocab:
    """Maps tokens to ids: the specials at ids 0–3, then ``tokens`` in the order given.

    Build one with :meth:`from_counts` or :meth:`build` rather than by hand. Unknown tokens
    encode to ``UNK_ID``.
    """

    def __init__(self, tokens: Sequence[str] = ()) -> None:
        seen: set[str] = set(SPECIALS)
        for t in tokens:
            if not isinstance(t, str) or not t:
                raise DataError(
                    f"invalid vocabulary token {t!r}", hint="tokens must be non-empty strings"
                )
            if t in seen:
                raise DataError(
                    f"duplicate vocabulary token {t!r}",
                    hint="each token may appear once; special tokens are added automatically",
                )
            seen.add(t)
        self._itos: list[str] = [*SPECIALS, *tokens]
        self._stoi: dict[str, int] = {t: i for i, t in enumerate(self._itos)}

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """Keep tokens seen at least ``min_freq`` times, most frequent first (ties: string
        order), at most ``max_size`` entries in all **including** the 4 specials.
        Tokens spelled like a special (e.g. ``<unk>`` in PTB) map to the special's id."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(SPECIALS):
            raise ValueError(f"max_size must be >= {len(SPECIALS)} (the specials), got {max_size}")
        kept = [(t, c) for t, c in counts.items() if c >= min_freq and t not in SPECIALS]
        kept.sort(key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            kept = kept[: max_size - len(SPECIALS)]
        return cls([t for t, _ in kept])

    @classmethod
    def build(
        cls, sequences: Iterable[Iterable[str]], min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """Count the tokens of ``sequences`` and call :meth:`from_counts`."""
        counts: Counter[str] = Counter()
        for seq in sequences:
            counts.update(seq)
        return cls.from_counts(counts, min_freq=min_freq, max_size=max_size)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self._itos[4:9]})"

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, specials first."""
        return list(self._itos)

    def token_to_id(self, token: str) -> int:
        return self._stoi.get(token, UNK_ID)

    def id_to_token(self, i: int) -> str:
        if not 0 <= i < len(self._itos):
            raise IndexError(f"id {i} out of range for a vocabulary of {len(self._itos)}")
        return self._itos[i]

    def encode(
        self, tokens: Iterable[str], *, add_bos: bool = False, add_eos: bool = False
    ) -> list[int]:
        ids = [self._stoi.get(t, UNK_ID) for t in tokens]
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def decode(self, ids: Iterable[int], *, skip_specials: bool = False) -> list[str]:
        """Tokens of ``ids``; with ``skip_specials`` drop ``<pad> <s> </s>`` (``<unk>`` is
        kept, so lost words stay visible)."""
        out = [self.id_to_token(int(i)) for i in ids]
        if skip_specials:
            out = [t for t in out if t not in (PAD, BOS, EOS)]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; ``tokens`` lists every token in id order."""
        return {"format": _FORMAT, "version": _VERSION, "tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Vocab:
        if not isinstance(d, Mapping) or d.get("format") != _FORMAT:
            raise DataError(
                "not a seqlab vocabulary (missing format='seqlab.vocab')",
                hint="pass the dict written by Vocab.to_dict()",
            )
        if d.get("version") != _VERSION:
            raise DataError(
                f"vocabulary format version {d.get('version')!r} is not supported "
                f"(this seqlab reads version {_VERSION})",
                hint="upgrade seqlab or re-create the vocabulary",
            )
        tokens = d.get("tokens")
        if not isinstance(tokens, list) or tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise DataError(
                f"vocabulary must start with the specials {list(SPECIALS)}",
                hint="ids 0-3 are fixed; re-create the vocabulary with Vocab.build",
            )
        return cls(tokens[len(SPECIALS) :])
