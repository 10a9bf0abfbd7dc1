"""Sequence-level knowledge distillation for copy_translation (seqlab.tasks.copy_distill,
``seqlab distill``, ``task.distill_tgt``): the file is checked against the training split,
the student keeps the references' vocabularies, copy ids and ``<unk>`` are assigned as for
a reference, the teacher's lines are its own translations, and a pool of a run with itself
distils as the run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.data.vocab import UNK, UNK_ID
from seqlab.errors import DataError
from seqlab.tasks.copy_distill import distill_lines, read_distilled
from seqlab.tasks.copy_translation import detokenize, tokenize
from tests.tasks.test_copy_translation import _task, files, run_config  # noqa: F401
from tests.train.tiny import tiny, write_preset


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_read_distilled_tokenises_keeps_unk_and_checks_the_line_count(tmp_path):
    path = tmp_path / "d.en"
    path.write_text("A man's T-shirt.\na <unk> runs .\n\n", encoding="utf-8")
    assert read_distilled(path, 3, tokenize) == [
        ["a", "man's", "t-shirt", "."], ["a", UNK, "runs", "."], [],
    ]  # fmt: skip
    with pytest.raises(DataError, match=r"d\.en has 3 lines but the training split has 4 pairs"):
        read_distilled(path, 4, tokenize)
    with pytest.raises(DataError, match="does not exist") as err:
        read_distilled(tmp_path / "missing.en", 3, tokenize)
    assert "seqlab distill" in str(err.value.hint)
    (tmp_path / "bad.en").write_bytes(b"\xff\xfe a\n")
    with pytest.raises(DataError, match="not UTF-8"):
        read_distilled(tmp_path / "bad.en", 1, tokenize)


def test_student_keeps_the_reference_vocabularies_and_copies_as_a_reference(files, tmp_path):  # noqa: F811
    teacher = _task(files)
    n = len(teacher.words["train"][0])
    src0 = teacher.words["train"][0][0]  # ein|eine mann|frau|kind namens NAME VERB .
    name = src0[3]
    lines = [f"the {name} <unk> zzqx ." if i == 0 else "a man runs ." for i in range(n)]
    path = tmp_path / "distilled.en"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    student = _task(files, distill_tgt=str(path))
    assert student.tokenizer_state() == teacher.tokenizer_state()  # the references' vocabularies
    assert student.words["train"][1][0] == ["the", name, UNK, "zzqx", "."]
    V = len(student.tgt_vocab)
    ex = student.examples["train"][0]
    # the name is in the source and outside the vocabulary: its copy id, as in a reference;
    # <unk> and a word the source lacks are both the unknown word
    assert ex.tgt_ext[1] == V + ex.oovs.index(name)
    assert ex.tgt_ext[2] == UNK_ID and ex.tgt_ext[3] == UNK_ID
    assert student.refs["train"][1] == "a man runs."
    assert student.examples["valid"] == teacher.examples["valid"]  # valid keeps its references
    # max_train_examples cuts the file as it cuts the training pairs
    cut = _task(files, distill_tgt=str(path), max_train_examples=5)
    assert cut.words["train"][1] == student.words["train"][1][:5]
    # with the references too: each source twice, distilled first, then its reference
    both = _task(files, distill_tgt=str(path), distill_with_refs=True)
    assert both.tokenizer_state() == teacher.tokenizer_state()
    assert both.words["train"][0] == teacher.words["train"][0] * 2
    assert both.words["train"][1] == student.words["train"][1] + teacher.words["train"][1]
    assert both.examples["train"][n:] == teacher.examples["train"]
    with pytest.raises(ValueError, match="distill_with_refs needs task.distill_tgt"):
        _task(files, distill_with_refs=True)
    path.write_text("a man runs .\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"has 1 lines but the training split has {n} pairs"):
        _task(files, distill_tgt=str(path))


def test_distill_writes_the_teachers_translations_and_a_student_trains(files, tmp_path):  # noqa: F811
    run = tmp_path / "teacher"
    api.train(run_config(files, 60), run_dir=run, quiet=True)
    out = tmp_path / "distilled.en"
    assert main(["distill", str(run), "--out", str(out), "--beam", "2"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    teacher = api.load(run)
    sources = Path(files["train_src"]).read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(sources) == 400
    # each line is the teacher's own beam-2 translation (it decodes as the paper: no
    # unk options in this run's config), in file order
    task = teacher.task
    assert not (task.cfg.unk_to_copy or task.cfg.block_unk or task.cfg.replace_unk)
    translated = task.translate(teacher.model, sources[:40], beam=2)
    assert [" ".join(tokenize(t)) for t in translated] == lines[:40]
    names = sum(line.split()[3] == tokenize(s)[3] for line, s in zip(lines, sources))
    assert names > 300  # a trained teacher copies the names; its lines are no placeholder
    # a pool of the run with itself distils as the run
    pooled = tmp_path / "pooled.en"
    assert (
        main(["distill", str(run), "--ensemble", str(run), "--out", str(pooled), "--beam", "2"])
        == 0
    )
    assert pooled.read_text(encoding="utf-8").splitlines() == lines
    # a student trains on the file, with the teacher's vocabularies
    cfg = run_config(files, 2, distill_tgt=str(out))
    api.train(cfg, run_dir=tmp_path / "student", quiet=True)
    loaded = api.load(tmp_path / "student")
    assert loaded.task.tokenizer_state() == task.tokenizer_state()
    assert loaded.task.cfg.distill_tgt == str(out)


def test_distill_with_unk_to_copy_in_the_config_keeps_unk(files, tmp_path):  # noqa: F811
    """The run's unk options do not reach the teacher's lines: ``<unk>`` stays where the
    teacher emits it, though the same run's ``translate`` with ``unk_to_copy`` copies there."""
    run = tmp_path / "teacher"
    api.train(run_config(files, 60), run_dir=run, quiet=True)
    teacher = api.load(run)
    with torch.no_grad():  # make <unk> the likeliest word at every step: P_vocab(<unk>) ≈ 1
        teacher.model.V_prime.weight[UNK_ID].fill_(0.0)
        teacher.model.V_prime.bias[UNK_ID] = 50.0
        teacher.model.w_h_star.weight.fill_(0.0)  # and p_gen = σ(b) ≈ 1 at every step
        teacher.model.w_s.weight.fill_(0.0)
        teacher.model.w_x.weight.fill_(0.0)
        teacher.model.b_ptr.fill_(1.0)
    task = teacher.task
    plain = distill_lines(task, teacher.model, beam=1)
    assert sum(UNK in line.split() for line in plain) > 300
    task.cfg = dataclasses.replace(task.cfg, unk_to_copy=True)
    assert distill_lines(task, teacher.model, beam=1) == plain
    sources = Path(files["train_src"]).read_text(encoding="utf-8").splitlines()[:20]
    copied = task.translate(teacher.model, sources, beam=1)
    assert copied != [detokenize(line.split()) for line in plain[:20]]
    assert not any(UNK in t for t in copied)  # the <unk> mass went to the names


def test_distill_refuses_bad_input_and_keeps_an_existing_file(files, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "kept.en"
    out.write_text("precious\n", encoding="utf-8")
    assert main(["distill", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert main(["distill", str(tmp_path), "--out", str(out), "--beam", "0"]) == 2
    assert "--beam must be >= 1" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "precious\n"
    other = tmp_path / "algorithmic"
    preset = write_preset(tmp_path / "tiny.yaml", tiny(**{"train.max_steps": 1}))
    assert main(["train", str(preset), "--run-dir", str(other)]) == 0
    capsys.readouterr()
    assert main(["distill", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "AlgorithmicTask" in err and "copy_translation runs" in err
    assert out.read_text(encoding="utf-8") == "precious\n"
