"""Image classification ("image_classify"): MNIST (seqlab's 8,000 / 2,000 split of the
test set) or scikit-learn's 8×8 digits (k-fold), for the ``convnet`` and ``resnet``
models (contract in seqlab.models.cnn).

Pipeline (docs/vision.md):

1. Load the images (``seqlab.data.images``, pixels scaled to [0, 1]) and split them:
   MNIST by :func:`~seqlab.data.images.mnist_split` (fixed seeded rule, **not** the
   standard MNIST split), digits by seeded stratified k-fold (fold ``fold`` = test).
   ``valid_split="holdout"``: a stratified ``valid_fraction`` of the training part is the
   validation set (early stopping / model selection); ``valid_split="test"``: validation
   *is* the test set and the whole training part trains — for learning curves (He 2016
   Fig. 6 plots test error during training), never for choosing a model.
2. Normalise x̂ = (x − μ) / σ with μ, σ the mean and standard deviation of the training
   pixels (saved in the checkpoint, so ``predict`` needs no data).
3. ``augment="shift"``: each training image is translated by (dy, dx), each uniform in
   −max_shift … max_shift, filling with background (0). ``"none"``: no augmentation.
4. Loss: cross-entropy per image, summed (the Trainer divides by the batch's ``n_tokens``
   = B). ``evaluate``: ``loss`` (mean CE), ``accuracy`` and ``error`` = 1 − accuracy.

Batching: every image has length 1 for the token-budget batcher, so
``train.batch.max_tokens`` (and ``max_sentences``) is the batch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.data.images import ImageSet, load_digits, load_mnist, mnist_split
from seqlab.data.mr import cv_split, holdout
from seqlab.errors import DataError, SeqlabError
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task

__all__ = ["ImageBatch", "ImageClassificationTask", "ImageClassifyConfig", "random_shift"]

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class ImageClassifyConfig:
    """``data``: ``mnist`` (``mnist/`` under the data folder) or ``digits`` (scikit-learn).
    ``test_fraction`` / ``split_seed``: MNIST's fixed split (0.2, 0 → 8,000 / 2,000).
    ``fold`` / ``n_folds``: the digits cross-validation run. ``valid_fraction``: part of
    the training images held out for validation (``valid_split="holdout"``);
    ``valid_split="test"`` validates on the test set (curves only). ``augment``: ``none``
    or ``shift`` (random translations of up to ``max_shift`` pixels). ``normalize``:
    standardise with the training pixels' mean and std."""

    data: Literal["mnist", "digits"] = "mnist"
    fold: int = 0
    n_folds: int = 5
    split_seed: int = 0
    test_fraction: float = 0.2
    valid_fraction: float = 0.1
    valid_split: Literal["holdout", "test"] = "holdout"
    augment: Literal["none", "shift"] = "none"
    max_shift: int = 2
    normalize: bool = True
    eval_batch_size: int = 500

    def __post_init__(self) -> None:
        if self.n_folds < 2:
            raise ConfigError(f"task.n_folds must be >= 2, got {self.n_folds}")
        if not 0 <= self.fold < self.n_folds:
            raise ConfigError(f"task.fold must be in [0, {self.n_folds}), got {self.fold}")
        if self.data == "mnist" and self.fold != 0:
            raise ConfigError("task.fold applies to data: digits (MNIST has one fixed split)")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError(f"task.test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(f"task.valid_fraction must be in (0, 1), got {self.valid_fraction}")
        if self.max_shift < 0:
            raise ConfigError(f"task.max_shift must be >= 0, got {self.max_shift}")
        if self.eval_batch_size < 1:
            raise ConfigError(f"task.eval_batch_size must be >= 1, got {self.eval_batch_size}")


@dataclass(frozen=True)
class ImageBatch:
    """A batch of images and labels.

    Shapes:
        x: (B, C, H, W) float32, normalised
        y: (B,) long class ids
        n_tokens: int = B — the loss is normalised per image
    """

    x: Tensor
    y: Tensor
    n_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ImageBatch:
        return ImageBatch(
            self.x.to(device, non_blocking=non_blocking),
            self.y.to(device, non_blocking=non_blocking),
            self.n_tokens,
        )


def random_shift(x: Tensor, max_shift: int, generator: torch.Generator | None = None) -> Tensor:
    """Translate each image by its own (dy, dx) ~ U{−s … s}², zero fill (no loop over B).

        out[b, c, i, j] = x[b, c, i − dy_b, j − dx_b]   (0 where that is outside the image)

    Shapes:
        x: (B, C, H, W) -> (B, C, H, W)
    """
    if max_shift == 0:
        return x
    B, C, H, W = x.shape
    s = max_shift
    d = torch.randint(-s, s + 1, (B, 2), generator=generator)  # (B, 2) = (dy, dx)
    padded = F.pad(x, (s, s, s, s))  # (B, C, H + 2s, W + 2s)
    rows = torch.arange(H)[None, :] + s - d[:, :1]  # (B, H)  source row i − dy (+ s)
    cols = torch.arange(W)[None, :] + s - d[:, 1:]  # (B, W)
    b = torch.arange(B)[:, None, None]  # (B, 1, 1)
    out = padded.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()  # (B, C, H, W)


@TASKS.register("image_classify", ImageClassifyConfig)
class ImageClassificationTask(Task):
    """Image classification scored by accuracy / error (MNIST split, digits k-fold)."""

    inference_methods = ("predict",)

    # ------------------------------------------------------------------ data

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        self._data: dict[str, tuple[Tensor, Tensor]] | None = None
        self._data_error: DataError | None = None
        if tokenizer_state is not None:
            self._restore(tokenizer_state)
        try:
            images = self._load()
        except DataError as exc:
            if tokenizer_state is None:
                raise
            self._data_error = exc  # a checkpoint predicts without the data
            return
        index = self._split(images.labels)
        x = torch.from_numpy(images.images)[:, None]  # (N, 1, H, W) in [0, 1]
        y = torch.from_numpy(images.labels)  # (N,)
        if tokenizer_state is None:
            train = x[torch.from_numpy(index["train"])]  # (N_train, 1, H, W)
            self.mean = float(train.mean()) if self.cfg.normalize else 0.0
            self.std = float(train.std()) if self.cfg.normalize else 1.0
            self.image_size = (int(x.shape[2]), int(x.shape[3]))
            self.in_channels = int(x.shape[1])
            self.n_classes = int(y.max()) + 1
        elif (int(x.shape[2]), int(x.shape[3])) != self.image_size:
            raise DataError(
                f"the images are {tuple(x.shape[2:])}, the checkpoint's model takes "
                f"{self.image_size}",
                path=images.source,
            )
        self._data = {  # split → ((N_split, 1, H, W), (N_split,))
            k: (x[torch.from_numpy(v)], y[torch.from_numpy(v)]) for k, v in index.items()
        }

    def _load(self) -> ImageSet:
        if self.cfg.data == "mnist":
            return load_mnist(self.data_dir)
        return load_digits()

    def _split(self, labels: np.ndarray) -> dict[str, np.ndarray]:
        """train / valid / test index arrays (disjoint except valid = test in "test" mode)."""
        cfg = self.cfg
        if cfg.data == "mnist":
            s = mnist_split(len(labels), cfg.split_seed, cfg.test_fraction)
            train_valid = holdout(labels, s["train"], cfg.valid_fraction, cfg.split_seed)
            index = {"test": s["test"], **train_valid}
        else:
            index = cv_split(labels, cfg.fold, cfg.n_folds, cfg.split_seed, cfg.valid_fraction)
        if cfg.valid_split == "test":
            index["train"] = np.sort(np.concatenate([index["train"], index["valid"]]))
            index["valid"] = index["test"]
        if not len(index["train"]) or not len(index["valid"]):
            raise DataError(
                f"too few images ({len(labels)}) for a train and a validation part",
                hint="use more images or raise task.valid_fraction",
            )
        return {k: index[k] for k in SPLITS}

    def tokenizer_state(self) -> dict[str, Any]:
        return {
            "data": self.cfg.data,
            "mean": self.mean,
            "std": self.std,
            "image_size": list(self.image_size),
            "in_channels": self.in_channels,
            "n_classes": self.n_classes,
        }

    def _restore(self, state: dict[str, Any]) -> None:
        keys = ("mean", "std", "image_size", "in_channels", "n_classes")
        if not isinstance(state, dict) or any(k not in state for k in keys):
            raise DataError(
                "the saved state is not an image_classify task's (needs " + ", ".join(keys) + ")",
                hint="load the checkpoint with the config it was saved with",
            )
        self.mean, self.std = float(state["mean"]), float(state["std"])
        self.image_size = (int(state["image_size"][0]), int(state["image_size"][1]))
        self.in_channels, self.n_classes = int(state["in_channels"]), int(state["n_classes"])

    @property
    def splits(self) -> dict[str, tuple[Tensor, Tensor]]:
        """train / valid / test: (images (N, 1, H, W) in [0, 1], labels (N,))."""
        if self._data is None:
            assert self._data_error is not None
            raise self._data_error
        return self._data

    def normalize(self, x: Tensor) -> Tensor:
        """x̂ = (x − μ) / σ with the training pixels' μ, σ.  (…, H, W) -> same."""
        return (x - self.mean) / self.std

    def image(self, split: str, i: int) -> tuple[Tensor, int]:
        """Image i of ``split``, normalised as the model sees it, and its label.
        -> ((C, H, W), label)."""
        x, y = self.splits[self._name(split)]
        return self.normalize(x[i]), int(y[i])

    # ------------------------------------------------------------------ training

    def model_kwargs(self) -> dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "n_classes": self.n_classes,
            "image_size": self.image_size,
        }

    def train_lengths(self) -> np.ndarray:
        return np.ones(len(self.splits["train"][1]), dtype=np.int64)

    def collate(self, indices: list[int], split: str = "train") -> ImageBatch:
        x, y = self.splits[split]
        index = torch.as_tensor(indices, dtype=torch.long)  # (B,)
        xb = x[index]  # (B, 1, H, W)
        if split == "train" and self.cfg.augment == "shift":
            xb = random_shift(xb, self.cfg.max_shift)  # (B, 1, H, W)
        return ImageBatch(self.normalize(xb), y[index], len(indices))

    def loss(self, model: nn.Module, batch: ImageBatch, label_smoothing: float = 0.0) -> LossOutput:
        """Σ_b CE(softmax(logits_b), y_b) (label-smoothed when ε > 0), in fp32."""
        logits = model(batch.x).float()  # (B, n_classes)
        ls = label_smoothing
        loss_sum = F.cross_entropy(logits, batch.y, reduction="sum", label_smoothing=ls)  # ()
        nll_sum = F.cross_entropy(logits.detach(), batch.y, reduction="sum")  # ()
        return LossOutput(loss_sum, nll_sum, batch.n_tokens)

    # ------------------------------------------------------------------ evaluation

    def _name(self, split: str) -> str:
        name = {"val": "valid", "dev": "valid"}.get(split, split)
        if name not in SPLITS:
            raise SeqlabError(
                f"the image_classify task has no split {split!r}; it has: train, valid, test"
            )
        return name

    def _logits(self, model: nn.Module, x: Tensor) -> Tensor:
        """Logits of normalised images in eval mode, in chunks.  (N, C, H, W) -> (N, K)."""
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            step = self.cfg.eval_batch_size
            chunks = [
                model(x[i : i + step].to(device)).float().cpu() for i in range(0, len(x), step)
            ]  # [(≤ step, K)]
        finally:
            model.train(was_training)
        return torch.cat(chunks)  # (N, K)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """Mean cross-entropy ``loss``, ``accuracy`` and ``error`` on ``split``."""
        x, y = self.splits[self._name(split)]
        logits = self._logits(model, self.normalize(x))  # (N, K)
        accuracy = float((logits.argmax(-1) == y).float().mean())
        return {
            "loss": float(F.cross_entropy(logits, y)),
            "accuracy": accuracy,
            "error": 1.0 - accuracy,
        }

    @torch.no_grad()
    def predict(self, model: nn.Module, images: Any) -> list[dict[str, Any]]:
        """Class and probabilities of raw images (values in [0, 1], as the loaders give):
        (N, H, W) or (N, C, H, W) → ``[{"label": 7, "probs": [p_0, …, p_9]}, …]``."""
        x = torch.as_tensor(np.asarray(images), dtype=torch.float32)  # (N, H, W) | (N, C, H, W)
        if x.dim() == 3:
            x = x[:, None]  # (N, 1, H, W)
        if x.dim() != 4 or tuple(x.shape[1:]) != (self.in_channels, *self.image_size):
            raise SeqlabError(
                f"predict: images must be (N, {self.image_size[0]}, {self.image_size[1]}) or "
                f"(N, {self.in_channels}, {self.image_size[0]}, {self.image_size[1]}), "
                f"got {tuple(x.shape)}"
            )
        if not len(x):
            return []
        probs = torch.softmax(self._logits(model, self.normalize(x)), -1)  # (N, K)
        return [{"label": int(p.argmax()), "probs": p.tolist()} for p in probs]
