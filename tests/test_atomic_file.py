"""seqlab.atomic_file.write_atomic: text and bytes land whole; a failure keeps the old file
and leaves no temporary file (used by run dirs, tokenizers, SentencePiece caches, results)."""

import os

import pytest

from seqlab import atomic_file
from seqlab.atomic_file import write_atomic


def test_text_and_bytes_replace_the_file_and_create_its_folder(tmp_path):
    path = tmp_path / "a" / "b.txt"
    write_atomic(path, "ünïcode\n")
    assert path.read_bytes() == "ünïcode\n".encode()
    write_atomic(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert os.listdir(path.parent) == ["b.txt"]


def test_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text("old\n", encoding="utf-8")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic_file.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new\n")
    assert path.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["config.yaml"]
