"""Vocab and tokenizers: special ids, min_freq, round trips (property tests), state
save/load, sentencepiece determinism and caching, error messages."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlab.data.readers import read_lines
from seqlab.data.spm import SentencePieceTokenizer
from seqlab.data.tokenizers import CharTokenizer, Tokenizer, WordTokenizer
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab
from seqlab.errors import DataError

from . import SHARED_DATA

PROPERTY = settings(max_examples=150, deadline=None, database=None, derandomize=True)

# --- a small generated corpus -----------------------------------------------------------

SYLLABLES = ["ka", "lo", "mü", "ße", "ri", "an", "to", "é", "ça", "ber", "ing", "st"]
WORDS = ["the", "a", "man", "dog", "street", "café", "Straße", "über", "12", "3.5", ",", ".", "!"]
WORDS += [a + b for a in SYLLABLES for b in SYLLABLES[:8]]  # 96 made-up words


def make_corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 3-12 words; a few have double spaces, leading/trailing spaces or
    a TAB, as real Multi30k lines do."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        if i % 50 == 0:
            s = s.replace(" ", "  ", 1)
        if i % 70 == 0:
            s = " " + s + " "
        if i % 90 == 0:
            s = s.replace(" ", "\t", 1)
        out.append(s)
    return out


CORPUS = make_corpus(600)
ALPHABET = "".join(sorted(set("".join(CORPUS))))


# --- Vocab ------------------------------------------------------------------------------


def test_vocab_specials_have_fixed_ids():
    v = Vocab()
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert v.tokens == ["<pad>", "<unk>", "<s>", "</s>"] == list(SPECIALS)
    assert [v.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]


def test_vocab_order_min_freq_max_size():
    counts = {"b": 3, "a": 3, "c": 5, "d": 1, "e": 2}
    assert Vocab.from_counts(counts).tokens[4:] == ["c", "a", "b", "e", "d"]  # freq, then str
    assert Vocab.from_counts(counts, min_freq=3).tokens[4:] == ["c", "a", "b"]
    assert Vocab.from_counts(counts, max_size=6).tokens[4:] == ["c", "a"]  # 6 incl. specials
    # the same counts in another insertion order give the same ids
    assert Vocab.from_counts(dict(reversed(counts.items()))) == Vocab.from_counts(counts)


def test_vocab_build_counts_sequences_and_maps_special_spellings():
    v = Vocab.build([["x", "<unk>", "y"], ["y", "</s>"]])
    assert v == Vocab.from_counts(Counter({"y": 2, "x": 1}))
    assert v.encode(["<unk>", "y", "</s>", "zzz"]) == [UNK_ID, 4, EOS_ID, UNK_ID]


def test_vocab_encode_decode():
    v = Vocab(["hello", "world"])
    ids = v.encode(["hello", "there", "world"], add_bos=True, add_eos=True)
    assert ids == [BOS_ID, 4, UNK_ID, 5, EOS_ID]
    assert v.decode(ids) == ["<s>", "hello", "<unk>", "world", "</s>"]
    assert v.decode([*ids, PAD_ID], skip_specials=True) == ["hello", "<unk>", "world"]
    with pytest.raises(IndexError, match="id 6 out of range for a vocabulary of 6"):
        v.decode([6])


def test_vocab_dict_round_trip_through_json():
    v = Vocab.build([c.split() for c in CORPUS], min_freq=2)
    d = json.loads(json.dumps(v.to_dict()))
    assert Vocab.from_dict(d) == v and Vocab.from_dict(d).tokens == v.tokens


@pytest.mark.parametrize(
    ("d", "message", "hint"),
    [
        ({"tokens": []}, "not a seqlab vocabulary", "Vocab.to_dict()"),
        ({"format": "seqlab.vocab", "version": 99}, "version 99 is not supported", "upgrade"),
        ({"format": "seqlab.vocab", "version": 1, "tokens": ["a"]}, "must start", "ids 0-3"),
        (
            {"format": "seqlab.vocab", "version": 1, "tokens": [*SPECIALS, "a", "a"]},
            "duplicate vocabulary token 'a'",
            "may appear once",
        ),
    ],
)
def test_vocab_from_dict_errors(d, message, hint):
    with pytest.raises(DataError, match=message) as err:
        Vocab.from_dict(d)
    assert hint in str(err.value)


def test_vocab_argument_checks():
    with pytest.raises(ValueError, match="min_freq must be >= 1"):
        Vocab.from_counts({"a": 1}, min_freq=0)
    with pytest.raises(ValueError, match="max_size must be >= 4"):
        Vocab.from_counts({"a": 1}, max_size=3)


# --- CharTokenizer ----------------------------------------------------------------------

CHAR = CharTokenizer.train(CORPUS)
WORD = WordTokenizer.train(CORPUS, min_freq=1)


@PROPERTY
@given(st.text(alphabet=ALPHABET, max_size=80))
def test_char_round_trip_property(text):
    ids = CHAR.encode(text)
    assert UNK_ID not in ids and len(ids) == len(text)
    assert CHAR.decode(ids) == text
    assert CHAR.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == text  # specials dropped


def test_char_unknown_and_special_ids():
    assert CHAR.vocab_size == len(ALPHABET) + 4
    assert [CHAR.id_to_piece(i) for i in range(4)] == list(SPECIALS)
    assert (CHAR.pad_id, CHAR.unk_id, CHAR.bos_id, CHAR.eos_id) == (0, 1, 2, 3)
    ids = CHAR.encode("a€b", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[2] == UNK_ID and ids[-1] == EOS_ID and len(ids) == 5
    assert CHAR.decode(ids) == "a⁇b"
    assert CHAR.pieces("a€b") == ["a", "€", "b"]
    with pytest.raises(ValueError, match="out of range"):
        CHAR.decode([CHAR.vocab_size])


def test_char_min_freq():
    tok = CharTokenizer.train(["aaab", "ab", "c"], min_freq=2)
    assert tok.vocab.tokens[4:] == ["a", "b"]
    assert tok.encode("abc") == [4, 5, UNK_ID]


# --- WordTokenizer ----------------------------------------------------------------------


def test_word_min_freq_and_single_space_join():
    tok = WordTokenizer.train(["the cat sat", "the dog  sat", "a cat"])  # min_freq=2
    assert tok.vocab.tokens[4:] == ["cat", "sat", "the"]
    assert tok.encode("the  cat ran") == [6, 4, UNK_ID]
    assert tok.decode([BOS_ID, 6, 4, UNK_ID, EOS_ID]) == "the cat ⁇"
    assert tok.pieces(" the\tcat ") == ["the", "cat"]
    assert WordTokenizer.train(["x y"], min_freq=1).vocab_size == 6


def test_word_lowercase():
    tok = WordTokenizer.train(["The Cat", "the cat"], lowercase=True)
    assert tok.encode("THE cat") == tok.encode("the CAT") != [UNK_ID, UNK_ID]
    assert tok.decode(tok.encode("The Cat")) == "the cat"


@PROPERTY
@given(st.lists(st.sampled_from(sorted(set(" ".join(CORPUS).split()))), max_size=20))
def test_word_round_trip_property(words):
    tok = WORD
    text = " ".join(words)
    assert tok.decode(tok.encode(text)) == text


# --- SentencePieceTokenizer -------------------------------------------------------------


SPM = {
    m: SentencePieceTokenizer.train(CORPUS, vocab_size=120, model_type=m)
    for m in ("bpe", "unigram")
}


@pytest.fixture(params=["bpe", "unigram"])
def sp_tok(request) -> SentencePieceTokenizer:
    return SPM[request.param]


def test_spm_special_ids(sp_tok):
    assert sp_tok.vocab_size == 120
    assert [sp_tok.id_to_piece(i) for i in range(4)] == list(SPECIALS)
    ids = sp_tok.encode("the dog", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and PAD_ID not in ids
    assert sp_tok.decode([*ids, PAD_ID]) == "the dog"
    assert "".join(sp_tok.pieces("the dog")).replace("▁", " ") == " the dog"
    assert UNK_ID in sp_tok.encode("the €")
    assert sp_tok.decode(sp_tok.encode("the €")) == "the  ⁇ "
    with pytest.raises(ValueError, match="out of range"):
        sp_tok.decode([120])


def test_spm_round_trip_on_corpus(sp_tok):
    assert [sp_tok.decode(sp_tok.encode(t)) for t in CORPUS] == CORPUS


@PROPERTY
@given(st.text(alphabet=ALPHABET, max_size=60))
def test_spm_round_trip_property(text):
    # identity normalisation and no whitespace clean-up: any text over the seen characters
    # (repeated, leading and trailing spaces, TABs included) decodes back to itself.
    for tok in SPM.values():
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_spm_training_is_deterministic(model_type):
    again = SentencePieceTokenizer.train(list(CORPUS), vocab_size=120, model_type=model_type)
    assert again.model_bytes == SPM[model_type].model_bytes


def test_spm_cache_hit_does_not_retrain(tmp_path, monkeypatch):
    first = SentencePieceTokenizer.train(CORPUS, 120, "bpe", cache_dir=tmp_path)
    assert not first.from_cache
    (model_file,) = tmp_path.glob("spm-*.model")
    assert model_file.read_bytes() == first.model_bytes and len(model_file.stem) == 4 + 64

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the model was cached")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", no_training)
    second = SentencePieceTokenizer.train(iter(CORPUS), 120, "bpe", cache_dir=tmp_path)
    assert second.from_cache and second.model_bytes == first.model_bytes
    assert second.settings == first.settings


@pytest.mark.parametrize(
    "change",
    [
        {"vocab_size": 121},
        {"model_type": "unigram"},
        {"character_coverage": 0.999},
        {"normalization": "nmt_nfkc"},
        {"texts": CORPUS[:-1]},
        {"texts": [*CORPUS[:-1], CORPUS[-1] + "!"]},
    ],
    ids=["vocab_size", "model_type", "coverage", "normalization", "fewer_texts", "edited_text"],
)
def test_spm_cache_miss_on_any_change(tmp_path, change):
    base = {"texts": CORPUS, "vocab_size": 120, "model_type": "bpe"}
    SentencePieceTokenizer.train(**base, cache_dir=tmp_path)
    tok = SentencePieceTokenizer.train(**{**base, **change}, cache_dir=tmp_path)
    assert not tok.from_cache
    assert len(list(tmp_path.glob("spm-*.model"))) == 2


def test_spm_corrupt_cache_file_is_retrained(tmp_path, caplog):
    first = SentencePieceTokenizer.train(CORPUS, 120, "bpe", cache_dir=tmp_path)
    (model_file,) = tmp_path.glob("spm-*.model")
    model_file.write_bytes(b"garbage")
    again = SentencePieceTokenizer.train(CORPUS, 120, "bpe", cache_dir=tmp_path)
    assert not again.from_cache and again.model_bytes == first.model_bytes
    assert model_file.read_bytes() == first.model_bytes and "re-training" in caplog.text


def test_spm_byte_fallback_round_trips_unseen_characters():
    tok = SentencePieceTokenizer.train(CORPUS, 300, "bpe", byte_fallback=True)
    assert UNK_ID not in tok.encode("€ 😀")
    assert tok.decode(tok.encode("the € 😀")) == "the € 😀"


def test_spm_nmt_nfkc_normalises_whitespace():
    tok = SentencePieceTokenizer.train(CORPUS, 120, "bpe", normalization="nmt_nfkc")
    assert tok.decode(tok.encode(" the  dog ")) == "the dog"  # no exact round trip


def test_spm_errors(tmp_path):
    with pytest.raises(DataError, match="Vocabulary size too high") as err:
        SentencePieceTokenizer.train(["a b", "b c"], vocab_size=500, model_type="bpe")
    assert "lower vocab_size" in str(err.value)
    with pytest.raises(DataError, match="training text 1 contains a newline") as err:
        SentencePieceTokenizer.train(["a", "b\nc"], vocab_size=10, model_type="bpe")
    assert "one sentence per text" in str(err.value)
    with pytest.raises(DataError, match="no training text"):
        SentencePieceTokenizer.train(["", ""], vocab_size=10, model_type="bpe")


def test_spm_model_file_with_other_special_ids_is_rejected(tmp_path):
    path = tmp_path / "other.model"
    with path.open("wb") as f:  # sentencepiece defaults: unk=0, bos=1, eos=2, no pad
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(CORPUS), model_writer=f, vocab_size=100, minloglevel=2
        )
    with pytest.raises(DataError, match=r"ids \(-1, 0, 1, 2\), seqlab needs \(0, 1, 2, 3\)") as e:
        SentencePieceTokenizer.from_model_file(path)
    assert str(e.value).startswith(f"{path}: ") and e.value.hint.endswith("--eos_id=3")
    assert str(e.value).count("--pad_id=0") == 1
    good = SentencePieceTokenizer.train(CORPUS, 120, "bpe")
    path.write_bytes(good.model_bytes)
    assert SentencePieceTokenizer.from_model_file(path) == good


@pytest.mark.skipif(SHARED_DATA is None, reason="shared/data not found (SEQLAB_DATA_DIR)")
def test_spm_round_trip_multi30k():
    raw = SHARED_DATA / "multi30k" / "task1" / "raw"
    train = read_lines(raw / "train.de.gz")
    corpus = train[:3000] + [t for t in train if "\t" in t or "  " in t]  # TAB, double spaces
    tok = SentencePieceTokenizer.train(corpus, vocab_size=800, model_type="bpe")
    seen = set("".join(corpus))
    val = [t for t in read_lines(raw / "val.de.gz")[:200] if set(t) <= seen]
    assert len(val) >= 190
    assert [tok.decode(tok.encode(t)) for t in corpus + val] == corpus + val


# --- state, save, load (all kinds) ------------------------------------------------------


@pytest.fixture(params=["char", "word", "sentencepiece"])
def any_tok(request) -> Tokenizer:
    return {"char": CHAR, "word": WORD, "sentencepiece": SPM["unigram"]}[request.param]


def test_state_json_round_trip_gives_identical_encodings(any_tok, tmp_path):
    state = json.loads(json.dumps(any_tok.to_state()))
    assert state["kind"] == any_tok.kind
    path = tmp_path / "tok.json"
    any_tok.save(path)
    for restored in (Tokenizer.from_state(state), Tokenizer.load(path), type(any_tok).load(path)):
        assert type(restored) is type(any_tok) and restored == any_tok
        assert restored.vocab_size == any_tok.vocab_size
        assert [restored.encode(t) for t in CORPUS[:50]] == [any_tok.encode(t) for t in CORPUS[:50]]
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_load_wrong_kind(tmp_path):
    path = tmp_path / "word.json"
    WORD.save(path)
    with pytest.raises(DataError, match="holds a 'word' tokenizer, not 'char'") as err:
        CharTokenizer.load(path)
    assert str(err.value).startswith(f"{path}: ") and "Tokenizer.load" in str(err.value)


def test_load_errors_name_file_line_and_hint(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "seqlab.tokenizer",\n "kind": }')
    with pytest.raises(DataError, match="invalid JSON") as err:
        Tokenizer.load(path)
    assert str(err.value).startswith(f"{path}:2: ") and "save the tokenizer again" in str(err.value)
    missing = tmp_path / "missing.json"
    with pytest.raises(DataError, match="tokenizer file not found") as err:
        Tokenizer.load(missing)
    assert str(err.value).startswith(f"{missing}: ") and "check the path" in str(err.value)


@pytest.mark.parametrize(
    ("state", "message", "hint"),
    [
        ({"kind": "char"}, "not a seqlab tokenizer state", "Tokenizer.to_state()"),
        ({"format": "seqlab.tokenizer", "version": 7}, "version 7 is not supported", "upgrade"),
        (
            {"format": "seqlab.tokenizer", "version": 1, "kind": "bpe"},
            "unknown tokenizer kind",
            "char",
        ),
        (
            {"format": "seqlab.tokenizer", "version": 1, "kind": "sentencepiece", "model": "@@"},
            "not valid base64",
            "save the tokenizer again",
        ),
        (
            {"format": "seqlab.tokenizer", "version": 1, "kind": "sentencepiece", "model": "AAAA"},
            "not a valid sentencepiece model",
            "SentencePieceTokenizer.train",
        ),
    ],
)
def test_from_state_errors(state, message, hint, tmp_path: Path):
    with pytest.raises(DataError, match=message) as err:
        Tokenizer.from_state(state)
    assert hint in str(err.value)
