"""Hashed character n-grams of a word: Bojanowski, Grave, Joulin & Mikolov 2017,
"Enriching Word Vectors with Subword Information" (fastText), §3.2.

A word w is written with boundary symbols, ⟨w⟩ = "<" + w + ">", and represented by the
set G_w of its character n-grams, n_min ≤ n ≤ n_max, plus the whole sequence ⟨w⟩ itself:

    G_where (n = 3) = {<wh, whe, her, ere, re>, <where>}

Each n-gram g is hashed into one of K buckets, id(g) = 1 + crc32(utf-8 of g) mod K (id 0
is the padding of a bag), and a model learns one vector z_g per bucket; the word's vector
is built from Σ or mean of z_g over G_w (seqlab.models.pointer_generator uses the mean,
added to the word's own embedding). A word never seen in training — a name, a number, a
foreign word — still gets a vector from the n-grams it shares with seen words.

crc32 (zlib) replaces fastText's FNV-1a: any fixed hash works, but it must not be Python's
``hash``, which is salted per process and would give another model at every run.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

__all__ = ["char_ngrams", "gram_ids", "pad_gram_ids"]


def char_ngrams(word: str, n_min: int = 3, n_max: int = 5) -> list[str]:
    """The n-grams of ⟨word⟩ for n_min ≤ n ≤ n_max (in order of n, then position), then
    ⟨word⟩ itself when it is longer than n_max. An empty word has none."""
    if not word:
        return []
    if not 1 <= n_min <= n_max:
        raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    bounded = f"<{word}>"
    grams = [
        bounded[i : i + n] for n in range(n_min, n_max + 1) for i in range(len(bounded) - n + 1)
    ]
    if len(bounded) > n_max:
        grams.append(bounded)
    return grams


@lru_cache(maxsize=1 << 18)
def gram_ids(word: str, n_min: int, n_max: int, buckets: int) -> tuple[int, ...]:
    """Bucket ids in [1, buckets] of ``char_ngrams(word, n_min, n_max)`` (cached per word,
    so every occurrence of a word shares one tuple)."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    grams = char_ngrams(word, n_min, n_max)
    return tuple(1 + zlib.crc32(g.encode("utf-8")) % buckets for g in grams)


def pad_gram_ids(rows: Sequence[Sequence[tuple[int, ...]]], length: int | None = None) -> Tensor:
    """B rows of per-position id tuples → a (B, S, G) long tensor, 0-padded in S and G.

    ``length``: S (default the longest row); G is the most n-grams of any position (1 at
    least, so a batch without n-grams is all padding)."""
    S = max((len(r) for r in rows), default=0) if length is None else length
    G = max((len(g) for r in rows for g in r), default=0)
    out = np.zeros((len(rows), S, max(G, 1)), dtype=np.int64)
    for b, row in enumerate(rows):
        for i, ids in enumerate(row):
            out[b, i, : len(ids)] = ids
    return torch.from_numpy(out)
