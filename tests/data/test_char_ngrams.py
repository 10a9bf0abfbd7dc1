"""Hashed character n-grams (fastText, Bojanowski et al. 2017 §3.2): the paper's worked
example, the hash is fixed across processes, padding of a batch."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import pytest
import torch

from seqlab.data.char_ngrams import char_ngrams, gram_ids, pad_gram_ids


def test_the_papers_example_where_with_trigrams():
    """§3.2: "where", n = 3 → <wh, whe, her, ere, re> and the special sequence <where>."""
    assert char_ngrams("where", 3, 3) == ["<wh", "whe", "her", "ere", "re>", "<where>"]


def test_range_of_n_and_short_words():
    grams = char_ngrams("ab", 3, 5)
    assert grams == ["<ab", "ab>", "<ab>"]  # <ab> has length 4 ≤ n_max: not added twice
    assert len(char_ngrams("barcelona", 3, 5)) == 9 + 8 + 7 + 1
    assert char_ngrams("", 3, 5) == []
    with pytest.raises(ValueError, match="n_min"):
        char_ngrams("word", 4, 3)


def test_ids_are_crc32_buckets_shifted_past_padding():
    ids = gram_ids("1102", 3, 5, 1000)
    expected = [1 + zlib.crc32(g.encode()) % 1000 for g in char_ngrams("1102", 3, 5)]
    assert list(ids) == expected and all(1 <= i <= 1000 for i in ids)
    assert gram_ids("1102", 3, 5, 1000) is ids  # cached: one tuple per word
    with pytest.raises(ValueError, match="buckets"):
        gram_ids("x", 3, 5, 0)


def test_ids_do_not_depend_on_pythons_hash_seed():
    code = "from seqlab.data.char_ngrams import gram_ids; print(gram_ids('zürich', 3, 5, 97))"
    seen = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        seen.add(out.stdout.strip())
    assert seen == {str(gram_ids("zürich", 3, 5, 97))}


def test_pad_gram_ids_pads_positions_and_grams_with_zero():
    rows = [[(3, 4, 5), ()], [(7,)]]
    out = pad_gram_ids(rows, length=3)
    assert out.dtype == torch.long and out.shape == (2, 3, 3)
    assert out[0, 0].tolist() == [3, 4, 5] and out[0, 1].tolist() == [0, 0, 0]
    assert out[1, 0].tolist() == [7, 0, 0] and int(out[1, 1:].abs().sum()) == 0
    assert pad_gram_ids([[()]]).shape == (1, 1, 1)
