"""benchmarks/results_doc.py: a benchmark replaces its own section of docs/results.md, keeps
every other byte, and never leaves a half-written file."""

import os

import pytest

from benchmarks import results_doc
from benchmarks.results_doc import machine_description, with_section, write_section
from seqlab import atomic_file

DOC = """# Results

Intro line.

## Language models

old LM table
old LM note

## Word embeddings

vectors table
"""


def test_a_section_in_the_middle_is_replaced_and_the_rest_kept(tmp_path):
    path = tmp_path / "results.md"
    path.write_text(DOC, encoding="utf-8")
    write_section(path, "## Language models\n\nnew LM table\n", "## Language models")
    assert path.read_text(encoding="utf-8") == DOC.replace(
        "old LM table\nold LM note\n", "new LM table\n"
    )


def test_the_last_section_is_replaced_up_to_the_end():
    out = with_section(DOC, "## Word embeddings\n\nnew vectors", "## Word embeddings")
    assert out == DOC.replace("vectors table\n", "new vectors\n")


def test_a_new_section_is_appended_after_a_blank_line_and_a_missing_file_created(tmp_path):
    assert with_section(DOC, "## NTM\n\nbits", "## NTM") == DOC + "\n## NTM\n\nbits\n"
    path = tmp_path / "sub" / "results.md"
    write_section(path, "## NTM\n\nbits", "## NTM")
    assert path.read_text(encoding="utf-8") == "# Results\n\n## NTM\n\nbits\n"


def test_writing_the_same_section_twice_changes_nothing(tmp_path):
    path = tmp_path / "results.md"
    path.write_text(DOC, encoding="utf-8")
    section = "## Language models\n\nnew LM table"
    write_section(path, section, "## Language models")
    once = path.read_bytes()
    write_section(path, section, "## Language models")
    assert path.read_bytes() == once


def test_a_heading_that_is_only_a_prefix_of_another_is_not_confused():
    doc = "# Results\n\n## Language models (GPU)\n\ngpu rows\n"
    out = with_section(doc, "## Language models\n\ncpu rows", "## Language models")
    assert out == doc + "\n## Language models\n\ncpu rows\n"


def test_a_section_that_does_not_start_with_its_heading_is_refused():
    with pytest.raises(ValueError, match="must start with its heading '## NTM'"):
        with_section(DOC, "NTM table", "## NTM")


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "results.md"
    path.write_text(DOC, encoding="utf-8")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_file.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_section(path, "## Language models\n\nnew", "## Language models")
    assert path.read_text(encoding="utf-8") == DOC
    assert os.listdir(tmp_path) == ["results.md"]


def test_the_machine_line_names_cores_torch_and_python():
    line = machine_description()
    assert f"{os.cpu_count()} cores" in line and "torch " in line and "Python 3." in line


def test_the_body_of_a_section_is_read_without_its_heading(tmp_path):
    path = tmp_path / "results.md"
    path.write_text(DOC, encoding="utf-8")
    assert results_doc.section_body(path, "## Language models") == [
        "",
        "old LM table",
        "old LM note",
        "",
    ]
    assert results_doc.section_body(path, "## Word embeddings") == ["", "vectors table"]
    assert results_doc.section_body(path, "## NTM") == []
    assert results_doc.section_body(tmp_path / "missing.md", "## NTM") == []


def test_figures_go_to_docs_only_with_the_docs_table(tmp_path, monkeypatch):
    from benchmarks.results_doc import DOCS_RESULTS, ROOT, beside_out

    assert beside_out(DOCS_RESULTS, "peers.json") == ROOT / "docs/figures/peers.json"
    monkeypatch.chdir(ROOT)  # the relative default some scripts use names the same file
    assert beside_out("docs/results.md", "a.png") == ROOT / "docs/figures/a.png"
    assert beside_out(tmp_path / "quick.md", "peers.json") == tmp_path / "peers.json"
