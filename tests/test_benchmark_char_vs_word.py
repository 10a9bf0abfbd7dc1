"""benchmarks/char_vs_word.py: the word model's bits per character, and one section built
from levels that trained in separate processes."""

from __future__ import annotations

import math

import pytest

from benchmarks.char_vs_word import HEADING, bpc_of_word_model, merge, render, text_counts
from seqlab import api

COUNTS = {"valid": {"words": 10, "chars": 50}, "test": {"words": 20, "chars": 100}}


def _record(level: str, bpc: float, command: str) -> dict:
    r = {"level": level, "preset": f"ptb-{level}", "params": 2_580_000, "minutes": 15.0,
         "updates": 1000, "epochs": 1.5, "tokens_per_s": 4000.0, "chars_per_s": 20000.0,
         "checkpoint": "best (step 1000)", "valid_bpc": bpc, "test_bpc": bpc + 0.01,
         "command": command, "run_on": f"Machine: X. Budget: 15 min ({level})."}  # fmt: skip
    if level == "word":
        r |= {"valid_ppl": 120.0, "test_ppl": 115.0}
    return r


def test_word_bits_per_character_is_the_code_length_of_the_same_characters():
    # 10 words (incl. </s>) at ln 4 nats each = 20 bits over 50 characters = 0.4 bpc
    assert bpc_of_word_model(math.log(4.0), 10, 50) == pytest.approx(0.4, abs=1e-12)


def test_levels_from_two_processes_make_one_table_word_first(tmp_path):
    path = tmp_path / "char_vs_word.json"
    path.write_text('[{"level": "char", "old": true}]', encoding="utf-8")
    rows = merge(path, [_record("char", 1.6, "B"), _record("word", 1.4, "A")])
    assert [r["level"] for r in rows] == ["word", "char"] and "old" not in rows[1]
    section = render(rows, COUNTS)
    lines = section.splitlines()
    assert lines[0] == HEADING
    assert "Command: `A`" in lines and "Command: `B`" in lines
    assert any(x.startswith("| word | `ptb-word` |") and "**1.400**" in x for x in lines)
    assert any(x.startswith("| char |") and x.endswith("| — |") for x in lines)
    assert "5.00 characters a word token" in section


@pytest.mark.skipif(api.default_data_dir() is None, reason="needs ../shared/data (PTB)")
def test_ptb_counts_have_more_characters_than_words():
    counts = text_counts(None)
    for split in ("valid", "test"):
        ratio = counts[split]["chars"] / counts[split]["words"]
        assert 4.5 < ratio < 6.5, (split, counts[split])
