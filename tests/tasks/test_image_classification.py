"""The image_classify task: MNIST split + holdout, digits folds, normalisation from the
training part, random shifts, loss / evaluate, and an end-to-end run through the Trainer
(train → load → evaluate → predict, and predict from a checkpoint without the data)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seqlab.models.cnn  # noqa: F401  (registers convnet)
from seqlab import api
from seqlab.config import ConfigError
from seqlab.errors import DataError, SeqlabError
from seqlab.models.cnn import ConvNet, ConvNetConfig
from seqlab.tasks.image_classification import (
    ImageClassificationTask,
    ImageClassifyConfig,
    random_shift,
)
from tests.models.vision_data import write_quadrant_mnist

torch.set_num_threads(1)


def make_task(data_dir, **kw):
    task = ImageClassificationTask(ImageClassifyConfig(**kw), data_dir, 0)
    task.prepare(None)
    return task


def test_mnist_split_holdout_and_normalisation(tmp_path):
    pixels, labels = write_quadrant_mnist(tmp_path, n=200)
    task = make_task(tmp_path)
    sizes = {k: len(v[1]) for k, v in task.splits.items()}
    assert sizes == {"train": 144, "valid": 16, "test": 40}  # 200 · 0.2 test; 10 % of 160
    assert task.model_kwargs() == {"in_channels": 1, "n_classes": 4, "image_size": (12, 12)}
    train_px = torch.cat([task.splits["train"][0].flatten()])
    assert task.mean == pytest.approx(float(train_px.mean()), abs=1e-6)
    assert task.std == pytest.approx(float(train_px.std()), abs=1e-6)
    x, label = task.image("test", 0)
    assert x.shape == (1, 12, 12)
    torch.testing.assert_close(
        x * task.std + task.mean, task.splits["test"][0][0], atol=1e-5, rtol=0
    )
    assert label == int(task.splits["test"][1][0])
    # valid_split=test: the curves' mode trains on all 160 and validates on the test part
    curves = make_task(tmp_path, valid_split="test")
    assert len(curves.splits["train"][1]) == 160
    torch.testing.assert_close(curves.splits["valid"][0], curves.splits["test"][0], atol=0, rtol=0)


def test_digits_folds_partition_the_data():
    tests = []
    for fold in range(5):
        task = make_task(None, data="digits", fold=fold)
        sizes = [len(task.splits[k][1]) for k in ("train", "valid", "test")]
        assert sum(sizes) == 1797 and 359 <= sizes[2] <= 360
        tests.append(task.splits["test"][0].flatten(1))
    assert task.image_size == (8, 8) and task.n_classes == 10
    assert sum(len(t) for t in tests) == 1797


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="task.fold"):
        ImageClassifyConfig(data="mnist", fold=1)
    with pytest.raises(ConfigError, match="task.valid_fraction"):
        ImageClassifyConfig(valid_fraction=0.0)
    with pytest.raises(DataError, match="mnist"):
        make_task(None)  # no data folder


def test_random_shift_matches_a_per_image_reference():
    x = torch.randn(6, 2, 5, 7)
    g = torch.Generator().manual_seed(3)
    out = random_shift(x, 2, generator=g)
    d = torch.randint(-2, 3, (6, 2), generator=torch.Generator().manual_seed(3))
    for b in range(6):  # reference: shift with zero fill, one image at a time
        dy, dx = int(d[b, 0]), int(d[b, 1])
        ref = torch.zeros(2, 5, 7)
        src = x[b, :, max(0, -dy) : 5 - max(0, dy), max(0, -dx) : 7 - max(0, dx)]
        ref[:, max(0, dy) : max(0, dy) + src.shape[1], max(0, dx) : max(0, dx) + src.shape[2]] = src
        torch.testing.assert_close(out[b], ref, atol=0, rtol=0)
    torch.testing.assert_close(random_shift(x, 0), x, atol=0, rtol=0)


def test_collate_loss_and_evaluate(tmp_path):
    write_quadrant_mnist(tmp_path, n=60)
    task = make_task(tmp_path, augment="shift", max_shift=1)
    batch = task.collate([0, 1, 2], "train")
    assert batch.x.shape == (3, 1, 12, 12) and batch.n_tokens == 3
    plain = task.collate([0, 1, 2], "test")
    torch.testing.assert_close(plain.x, task.normalize(task.splits["test"][0][:3]), atol=0, rtol=0)
    model = ConvNet(
        ConvNetConfig(channels=(4,), kernel_size=3, hidden=None, dropout=0.0), 1, 4, (12, 12)
    )
    out = task.loss(model, plain, label_smoothing=0.1)
    ref = F.cross_entropy(model(plain.x), plain.y, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(out.loss_sum, ref, atol=1e-5, rtol=0)
    m = task.evaluate(model, "test")
    assert set(m) == {"loss", "accuracy", "error"}
    assert m["error"] == pytest.approx(1 - m["accuracy"], abs=1e-12)
    assert np.allclose(task.train_lengths(), 1)
    with pytest.raises(SeqlabError, match="no split"):
        task.evaluate(model, "dev2")


def test_end_to_end_train_load_predict(tmp_path):
    pixels, labels = write_quadrant_mnist(tmp_path / "data", n=200)
    config = {
        "task": {"name": "image_classify", "data": "mnist", "augment": "none"},
        "model": {
            "name": "convnet",
            "channels": [8, 16],
            "kernel_size": 3,
            "hidden": 32,
            "dropout": 0.0,
        },
        "train": {
            "max_steps": 60,
            "precision": "fp32",
            "threads": 1,
            "progress": False,
            "log_every": 20,
            "valid_every": 30,
            "save_every": 30,
            "clip_norm": None,
            "optim": {"name": "adam", "lr": 3e-3},
            "batch": {"max_tokens": 32, "max_sentences": 32, "max_len": 1},
            "early_stop_metric": "accuracy",
            "early_stop_mode": "max",
        },
    }
    run = api.train(config, run_dir=tmp_path / "run", data_dir=tmp_path / "data", quiet=True)
    assert run.metrics["step"] == 60
    loaded = api.load(tmp_path / "run", data_dir=tmp_path / "data")
    assert loaded.evaluate("test")["accuracy"] >= 0.95
    preds = loaded.predict(pixels[:8] / 255.0)
    assert [p["label"] for p in preds] == labels[:8].tolist()
    assert all(abs(sum(p["probs"]) - 1) < 1e-5 for p in preds)
    # the checkpoint carries μ, σ and the image size: predicting needs no data
    (tmp_path / "empty").mkdir()
    bare = api.load(tmp_path / "run", data_dir=tmp_path / "empty")
    assert [p["label"] for p in bare.predict(pixels[:8] / 255.0)] == labels[:8].tolist()
    with pytest.raises(DataError):
        bare.evaluate("test")
    with pytest.raises(SeqlabError, match="images must be"):
        bare.predict(np.zeros((2, 28, 28)))
