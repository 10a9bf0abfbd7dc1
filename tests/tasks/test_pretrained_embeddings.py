"""Pretrained word vectors into the language-model and copy-translation tasks' embedding
tables (``task.embeddings_path``, ``task.src_embeddings_path`` / ``tgt_embeddings_path``):
the rows of the vocabulary's words are the file's vectors exactly (a tied output layer
reads the same table); a restored run never reads the file; a wrong level, width or
model is a clear error."""

from __future__ import annotations

import pytest
import torch

from seqlab.errors import DataError
from seqlab.run_config import resolve_run
from seqlab.tasks.lm import LMTask, LMTaskConfig
from seqlab.train.build import build_model, build_task
from tests.tasks.test_copy_translation import files, run_config  # noqa: F401

LINES = ["the cat sat on the mat", "a dog ran to the cat", "the mat was red and the dog sat"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES[i % 3] for i in range(60)) + "\n", encoding="utf-8")
    return path


def _vectors(path, rows: dict[str, list[float]]) -> str:
    dim = len(next(iter(rows.values())))
    lines = [f"{len(rows)} {dim}"] + [f"{w} {' '.join(map(str, v))}" for w, v in rows.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _lm_run(corpus, vectors: str, model: dict):
    return resolve_run(
        {
            "task": {"name": "lm", "data": "text", "path": str(corpus), "embeddings_path": vectors},
            "model": model,
        }
    )


def _build(cfg, state=None):
    task = LMTask(cfg.task_cfg, None, 0)
    task.prepare(state)
    return task, build_model(cfg, task)


@pytest.mark.parametrize(
    ("model", "table"),
    [
        ({"name": "rnn_lm", "emb_dim": 4, "hidden": 4, "tie_weights": True}, "embed"),
        ({"name": "transformer_lm", "d_model": 4, "n_heads": 1, "d_ff": 8, "layers": 1}, "embed"),
        ({"name": "nplm", "n": 3, "m": 4, "h": 6}, "C"),
        ({"name": "pointer_sentinel", "emb_dim": 4, "hidden": 4}, "embed"),
    ],
)
def test_an_lm_starts_from_the_vectors_and_a_restored_run_never_reads_them(
    tmp_path, corpus, model, table
):
    cat, dog = [0.5, -1.0, 2.0, 0.25], [-0.5, 1.5, 0.0, 3.0]
    path = _vectors(tmp_path / "v.txt", {"cat": cat, "Dog": dog, "zebra": [1.0] * 4})
    cfg = _lm_run(corpus, path, model)
    task, m = _build(cfg)
    E = getattr(m, table).weight
    vocab = task.tokenizer.vocab
    torch.testing.assert_close(E[vocab.token_to_id("cat")], torch.tensor(cat), atol=0, rtol=0)
    assert not torch.equal(E[vocab.token_to_id("dog")], torch.tensor(dog))  # "Dog" ≠ "dog"
    assert task.embedding_coverage == pytest.approx(1 / (len(vocab) - 4))
    (tmp_path / "v.txt").unlink()
    again, m2 = _build(cfg, task.tokenizer_state())  # a checkpoint restore: no file needed
    assert again.embedding_coverage is None


def test_char_level_or_a_wrong_width_is_refused_with_the_fix(tmp_path, corpus):
    path = _vectors(tmp_path / "v.txt", {"cat": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="needs task.level: word"):
        LMTaskConfig(data="text", path=str(corpus), level="char", embeddings_path=path)
    cfg = _lm_run(corpus, path, {"name": "rnn_lm", "emb_dim": 4, "hidden": 4})
    with pytest.raises(DataError, match="dimension 3 but the embedding layer 4.*--dim 4"):
        _build(cfg)


def test_copy_translation_starts_both_sides_from_their_vectors(tmp_path, files):  # noqa: F811
    src = _vectors(tmp_path / "de.txt", {"mann": [0.5] * 24, "namens": [-0.25] * 24})
    tgt = _vectors(tmp_path / "en.txt", {"man": [1.5] * 24})
    cfg = resolve_run(run_config(files, 1, src_embeddings_path=src, tgt_embeddings_path=tgt))
    task = build_task(cfg, None)
    model = build_model(cfg, task)
    S, T = model.src_embed.weight, model.tgt_embed.weight
    torch.testing.assert_close(S[task.src_vocab.token_to_id("mann")], torch.full((24,), 0.5))
    torch.testing.assert_close(S[task.src_vocab.token_to_id("namens")], torch.full((24,), -0.25))
    torch.testing.assert_close(T[task.tgt_vocab.token_to_id("man")], torch.full((24,), 1.5))
    assert task.embedding_coverage["tgt"] == pytest.approx(1 / (len(task.tgt_vocab) - 4))
    assert set(task.embedding_coverage) == {"src", "tgt"}


def test_a_model_without_the_table_is_named(tmp_path, corpus):
    from seqlab.tasks.pretrained_embeddings import load_vectors

    task = LMTask(LMTaskConfig(data="text", path=str(corpus)), None, 0)
    task.prepare()
    with pytest.raises(ValueError, match=r"task.embeddings_path: the model Linear has no embed"):
        load_vectors(
            torch.nn.Linear(2, 2), ("embed",), task.tokenizer.vocab, corpus, "task.embeddings_path"
        )
