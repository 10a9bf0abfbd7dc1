"""LazySplits: values load once, on first access; keys and membership load nothing."""

import pytest

from seqlab.data.lazy import LazySplits


def test_loads_each_key_once_on_first_access():
    calls = []

    def load(key):
        calls.append(key)
        return key.upper()

    m = LazySplits(["train", "test"], load)
    assert list(m) == ["train", "test"] and len(m) == 2 and "test" in m and "x" not in m
    assert calls == [] and m.loaded() == ()
    assert m["test"] == "TEST" and m["test"] == "TEST"
    assert calls == ["test"] and m.loaded() == ("test",)
    m.replace("train", "kept")
    assert m["train"] == "kept" and calls == ["test"]
    with pytest.raises(KeyError):
        m["valid"]
    with pytest.raises(KeyError):
        m.replace("valid", "x")
    assert dict(m.items()) == {"train": "kept", "test": "TEST"}
