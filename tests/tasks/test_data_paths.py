"""Every task reads a relative input path as given, else under the data folder
(``seqlab.data.readers.resolve_path``; ``seqlab config validate`` checks the same way): a
run started from another working directory with ``--data-dir`` finds its files."""

from __future__ import annotations

import pytest

from seqlab.errors import DataError
from seqlab.tasks.copy_translation import CopyTranslationTask
from seqlab.tasks.copy_translation_config import CopyTranslationConfig
from seqlab.tasks.lm import LMTask, LMTaskConfig
from seqlab.tasks.tagging import TaggingConfig, TaggingTask
from tests.tasks.test_copy_translation import _pairs, _write
from tests.tasks.test_tagging_task import sentences, write_conll


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """(data folder, an empty working directory, which is where the run starts)."""
    data, cwd = tmp_path / "data", tmp_path / "cwd"
    data.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return data


def test_copy_translation_finds_its_files_under_the_data_folder(elsewhere):
    files = _write(elsewhere, "train", _pairs(50, 0)) | _write(elsewhere, "valid", _pairs(9, 1))
    names = {k: v.rsplit("/", 1)[1] for k, v in files.items()}  # "train.de" …
    task = CopyTranslationTask(CopyTranslationConfig(data="files", **names), elsewhere, 0)
    task.prepare()
    assert len(task.words["train"][0]) == 50 and len(task.words["valid"][0]) == 9
    with pytest.raises(DataError, match="train.de"):
        CopyTranslationTask(CopyTranslationConfig(data="files", **names), None, 0).prepare()


def test_tagging_and_lm_text_find_theirs_too(elsewhere):
    for split, n in (("train", 30), ("valid", 8)):
        write_conll(elsewhere / f"{split}.conll", sentences(n, 0))
    cfg = TaggingConfig(data="files", train_path="train.conll", valid_path="valid.conll")
    task = TaggingTask(cfg, elsewhere)
    task.prepare()
    assert len(task.sentences["train"]) == 30
    (elsewhere / "corpus.txt").write_text("the cat sat on the mat\n" * 40, encoding="utf-8")
    lm = LMTask(LMTaskConfig(data="text", path="corpus.txt"), elsewhere, 0)
    lm.prepare()
    assert lm.ids("train").numel() > 0
