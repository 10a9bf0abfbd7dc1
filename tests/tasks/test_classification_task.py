"""The classify task: Kim-style tokenizer, splits, vocabulary from the training part only,
loss / evaluate / predict, checkpoint restore without the data, pretrained embeddings."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seqlab.models.classifiers  # noqa: F401  (registers avg_embedding)
from seqlab.config import ConfigError, from_dict
from seqlab.errors import DataError
from seqlab.registry import MODELS
from seqlab.tasks.base import LossOutput
from seqlab.tasks.classification import ClassificationTask, ClassifyConfig, clean_str

POS = ["a great film", "truly wonderful", "great fun", "wonderful acting", "a joy"]
NEG = ["a dull film", "truly awful", "dull and slow", "awful acting", "a bore"]


def write_tsv(path, n=4):
    lines = [f"pos\t{t} {i}" for i in range(n) for t in POS]
    lines += [f"neg\t{t} {i}" for i in range(n) for t in NEG]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_task(tmp_path, state=None, **kw):
    cfg = ClassifyConfig(data="tsv", path=str(write_tsv(tmp_path / "d.tsv")), min_freq=1, **kw)
    task = ClassificationTask(cfg, None, 0)
    task.prepare(state)
    return task


def model_for(task, seed=0, **kw):
    torch.manual_seed(seed)
    entry = MODELS.get("avg_embedding")
    return entry.target(entry.config_cls(d_embed=6, **kw), **task.model_kwargs())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("It's not good, really!", ["it", "'s", "not", "good", ",", "really", "!"]),
        ("Don't (ever) see it...", ["do", "n't", "(", "ever", ")", "see", "it"]),
        ("they've gone; we'll see", ["they", "'ve", "gone", "we", "'ll", "see"]),
        ("Café co-writer/director", ["café", "co", "writer", "director"]),
        ('the " conan " saga', ["the", "conan", "saga"]),
    ],
)
def test_clean_str(text, words):
    assert clean_str(text) == words


def test_splits_vocab_and_labels(tmp_path):
    task = make_task(tmp_path, n_folds=5, fold=2, valid_fraction=0.25)
    sizes = {k: len(v.ids) for k, v in task.splits.items()}
    assert sizes == {"train": 24, "valid": 8, "test": 8}
    assert task.labels == ["neg", "pos"]
    train_words = {w for t in task.splits["train"].texts for w in clean_str(t)}
    assert set(task.vocab.tokens[4:]) == train_words  # built on the training part only
    assert task.train_lengths().tolist() == [len(s) for s in task.splits["train"].ids]
    texts = [set(v.texts) for v in task.splits.values()]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])


def test_collate_loss_evaluate(tmp_path):
    task = make_task(tmp_path)
    model = model_for(task)
    batch = task.collate([0, 3, 5], "train")
    assert batch.x.shape[0] == 3 and batch.n_tokens == 3
    assert (batch.mask == (batch.x != 0)).all()
    out = task.loss(model, batch, label_smoothing=0.1)
    assert isinstance(out, LossOutput) and out.n_tokens == 3
    logits = model(batch.x, batch.mask)
    ref = F.cross_entropy(logits, batch.y, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(out.loss_sum, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        out.nll_sum, F.cross_entropy(logits, batch.y, reduction="sum"), atol=1e-6, rtol=0
    )
    metrics = task.evaluate(model, "test")
    assert set(metrics) == {"loss", "accuracy"} and 0 <= metrics["accuracy"] <= 1
    data = task.splits["test"]
    b = task.collate(list(range(len(data.ids))), "test")
    expected = (model(b.x, b.mask).argmax(-1) == b.y).float().mean()
    assert metrics["accuracy"] == pytest.approx(float(expected), abs=1e-7)


def test_predict_shape_and_training_makes_it_right(tmp_path):
    task = make_task(tmp_path)
    model = model_for(task)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    idx = list(range(len(task.splits["train"].ids)))
    for _ in range(30):
        opt.zero_grad()
        out = task.loss(model, task.collate(idx))
        (out.loss_sum / out.n_tokens).backward()
        opt.step()
    preds = task.predict(model, ["a great and wonderful film", "dull, awful and slow", ""])
    assert [p["label"] for p in preds[:2]] == ["pos", "neg"]
    for p in preds:
        assert set(p) == {"label", "probs"} and set(p["probs"]) == {"neg", "pos"}
        assert sum(p["probs"].values()) == pytest.approx(1.0, abs=1e-6)
    assert task.predict(model, []) == []
    assert model.training  # predict restores the mode


def test_restore_without_data_still_predicts(tmp_path):
    task = make_task(tmp_path)
    model = model_for(task)
    state = task.tokenizer_state()
    (tmp_path / "d.tsv").unlink()
    cfg = ClassifyConfig(data="tsv", path=str(tmp_path / "d.tsv"), min_freq=1)
    restored = ClassificationTask(cfg, None, 0)
    restored.prepare(state)
    assert restored.vocab == task.vocab and restored.labels == task.labels
    assert "embedding_init" not in restored.model_kwargs()
    assert restored.predict(model, ["great fun"]) == task.predict(model, ["great fun"])
    with pytest.raises(DataError, match="file not found"):
        restored.evaluate(model, "valid")


def test_embeddings_path_initialises_the_table_on_a_fresh_run_only(tmp_path):
    vectors = tmp_path / "vec.txt"
    vectors.write_text("2 6\ngreat 1 1 1 1 1 1\ndull -1 -1 -1 -1 -1 -1\n", encoding="utf-8")
    task = make_task(tmp_path, embeddings_path=str(vectors))
    model = model_for(task)
    E = model.embed.weight
    torch.testing.assert_close(E[task.vocab.token_to_id("great")], torch.ones(6), atol=0, rtol=0)
    torch.testing.assert_close(E[task.vocab.token_to_id("dull")], -torch.ones(6), atol=0, rtol=0)
    assert task.embedding_coverage == pytest.approx(2 / (len(task.vocab) - 4))
    again = ClassificationTask(task.cfg, None, 0)
    again.prepare(task.tokenizer_state())
    assert "embedding_init" not in again.model_kwargs()  # a checkpoint brings its weights


def test_mr_data_from_a_folder(tmp_path):
    folder = tmp_path / "mr_polarity"
    folder.mkdir()
    (folder / "rt-polarity.pos").write_bytes(
        b"".join(b"good \x97 fun %d \n" % i for i in range(20))
    )
    (folder / "rt-polarity.neg").write_bytes(
        b"".join(b"bad \x85 dull %d \n" % i for i in range(20))
    )
    task = ClassificationTask(ClassifyConfig(fold=9), tmp_path, 0)
    task.prepare()
    assert {k: len(v.ids) for k, v in task.splits.items()} == {"train": 32, "valid": 4, "test": 4}
    y = np.array(task.splits["test"].y)
    assert (y == 0).sum() == 2 and (y == 1).sum() == 2  # stratified


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"fold": 10}, "task.fold"),
        ({"n_folds": 1}, "task.n_folds"),
        ({"data": "tsv"}, "task.path"),
        ({"valid_fraction": 0.0}, "task.valid_fraction"),
        ({"clean": "nltk"}, "clean"),
    ],
)
def test_config_errors_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        from_dict(ClassifyConfig, data, where="task")
