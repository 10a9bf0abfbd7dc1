"""Sentence classification ("classify"): MR polarity or any ``label<TAB>text`` file.

Pipeline (docs/classification.md):

1. Read the data with the validated readers (``seqlab.data.mr``): MR (cp1252) or a
   ``label<TAB>text`` file. Split by the MR protocol: seeded stratified k-fold, fold
   ``fold`` is the test set, a stratified ``valid_fraction`` of the rest is the validation
   set (early stopping), the remainder trains. A TSV task may instead name a fixed
   ``test_path``.
2. Tokenize with :func:`clean_str` (Kim 2014's rules, lower-cased) and build the word
   vocabulary on the **training** part only (``min_freq``; ids 0–3 are the specials);
   restore it from ``tokenizer_state`` when loading a checkpoint (then the data files are
   optional: ``predict`` works without them).
3. Optionally copy pretrained word vectors into the model's embedding table
   (``embeddings_path``, a word2vec text file, via
   ``seqlab.data.word_vectors_io.init_embedding``) when a run starts; a checkpoint
   carries the trained table, so loading or resuming never reads the file.
4. Loss: cross-entropy per sentence, summed (the Trainer divides by the number of
   sentences: ``n_tokens`` of a batch is its size B). ``evaluate``: loss and accuracy.
5. With ``char_ngrams`` K > 0 each batch also carries every word's hashed character
   n-grams (``grams``, seqlab.data.char_ngrams; computed from the word's spelling, so a
   word outside the vocabulary has them too) and the model is built with
   ``gram_buckets=K``; only ``nbsvm`` reads them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.data.char_ngrams import gram_ids, pad_gram_ids
from seqlab.data.collate import pad_batch
from seqlab.data.mr import cv_split, holdout, locate_mr, read_label_tsv, read_mr
from seqlab.data.readers import resolve_path
from seqlab.data.vocab import PAD_ID, UNK_ID, Vocab
from seqlab.errors import DataError, SeqlabError
from seqlab.nn.masks import padding_mask
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task

__all__ = ["ClassBatch", "ClassificationTask", "ClassifyConfig", "clean_str"]

log = logging.getLogger("seqlab.tasks")

# Kim (2014)'s clean_str, rewritten: keep letters, digits and ( ) , ! ? ' ` only; split
# English clitics off their word; put spaces around ( ) , ! ?; split on whitespace.
_DROP = re.compile(r"[^\w(),!?'`]|_")
_CLITIC = re.compile(r"(n't|'s|'ve|'re|'d|'ll|'m)")
_PUNCT = re.compile(r"([(),!?])")


def clean_str(text: str, lowercase: bool = True) -> list[str]:
    """Kim 2014-style word tokenization: ``"It's not good, really!"`` →
    ``["it", "'s", "not", "good", ",", "really", "!"]``; ``"don't"`` → ``["do", "n't"]``.

    Deviations from Kim's ``clean_str``: letters outside A–Z (é, ñ …) are kept rather than
    deleted, "'m" is split off like "'s", and "(" ")" are not backslash-escaped.
    """
    if lowercase:
        text = text.lower()
    text = _DROP.sub(" ", text)
    text = _CLITIC.sub(r" \1", text)
    text = _PUNCT.sub(r" \1 ", text)
    return text.split()


@dataclass(frozen=True)
class ClassifyConfig:
    """Data, split, tokenizer and evaluation settings of the classify task.

    ``data``: ``mr`` (``mr_polarity/`` under the data folder) or ``tsv`` (``path``, a
    ``label<TAB>text`` file, split into folds like MR unless ``test_path`` names a fixed
    test file). ``fold`` / ``n_folds`` / ``split_seed``: the cross-validation run;
    ``valid_fraction`` of the non-test data is held out for validation. ``encoding``:
    default cp1252 for MR, utf-8 for TSV. ``clean``: ``kim2014`` (:func:`clean_str`) or
    ``whitespace``. ``max_len``: tokens kept per sentence (the rest is cut).
    ``embeddings_path``: word2vec text vectors for the embedding table (its D must equal
    the model's embedding width). ``init_lm``: a run folder or checkpoint of a seqlab
    recurrent LM (``model: rnn_lm``, word level) whose embedding and recurrent weights
    start an ``rnn_classifier`` of the same sizes (other classifiers: the embedding table
    only; Dai & Le 2015, ``seqlab.models.lm_transfer``); applied after ``embeddings_path``.
    ``char_ngrams``: K > 0 gives the model each word's character n-grams
    (``char_ngram_min`` ≤ n ≤ ``char_ngram_max``, plus the bounded word; K hash buckets);
    0 = off. Only the ``nbsvm`` model reads them. ``refit``: train on the training and
    the validation part together (the vocabulary too) — the second stage of "select, then
    refit on all non-test data": give ``train.max_steps`` the step a run without refit
    chose, turn early stopping off and keep the latest checkpoint; ``valid`` metrics are
    then not held out (benchmarks/classify.py ``--refit``).
    """

    data: Literal["mr", "tsv"] = "mr"
    path: str | None = None
    test_path: str | None = None
    encoding: str | None = None
    fold: int = 0
    n_folds: int = 10
    split_seed: int = 0
    valid_fraction: float = 0.1
    clean: Literal["kim2014", "whitespace"] = "kim2014"
    lowercase: bool = True
    min_freq: int = 2
    max_vocab: int | None = None
    max_len: int = 128
    embeddings_path: str | None = None
    init_lm: str | None = None
    eval_batch_size: int = 256
    char_ngrams: int = 0
    char_ngram_min: int = 2
    char_ngram_max: int = 5
    refit: bool = False

    def __post_init__(self) -> None:
        if self.data == "tsv" and self.path is None:
            raise ConfigError("task.path: data: tsv needs path (a label<TAB>text file)")
        if self.data == "mr" and (self.path is not None or self.test_path is not None):
            raise ConfigError("task.path/test_path are set but data is 'mr': set data: tsv")
        if self.n_folds < 2:
            raise ConfigError(f"task.n_folds must be >= 2, got {self.n_folds}")
        if not 0 <= self.fold < self.n_folds:
            raise ConfigError(f"task.fold must be in [0, {self.n_folds}), got {self.fold}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ConfigError(f"task.valid_fraction must be in (0, 1), got {self.valid_fraction}")
        for name in ("min_freq", "max_len", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if self.char_ngrams < 0:
            raise ConfigError(f"task.char_ngrams must be >= 0 (0 = off), got {self.char_ngrams}")
        if not 1 <= self.char_ngram_min <= self.char_ngram_max:
            raise ConfigError(
                "task.char_ngram_min / char_ngram_max: need 1 <= min <= max, got "
                f"{self.char_ngram_min} / {self.char_ngram_max}"
            )
        if self.max_vocab is not None and self.max_vocab < 5:
            raise ConfigError(f"task.max_vocab must be >= 5 or null, got {self.max_vocab}")


@dataclass(frozen=True)
class ClassBatch:
    """A padded batch of sentences and their labels.

    Shapes:
        x:        (B, T) long, word ids, PAD_ID after each sentence
        mask:     (B, T) bool, True = real token (a prefix of each row)
        y:        (B,) long, class ids
        n_tokens: int = B — the loss is normalised per sentence
        grams:    (B, T, G) long, each word's character n-gram ids, 0 = none; None unless
                  task.char_ngrams > 0
    """

    x: Tensor
    mask: Tensor
    y: Tensor
    n_tokens: int
    grams: Tensor | None = None

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ClassBatch:
        return ClassBatch(
            self.x.to(device, non_blocking=non_blocking),
            self.mask.to(device, non_blocking=non_blocking),
            self.y.to(device, non_blocking=non_blocking),
            self.n_tokens,
            None if self.grams is None else self.grams.to(device, non_blocking=non_blocking),
        )

    def model_inputs(self) -> tuple[Tensor, ...]:
        """What the model's forward takes: (x, mask) or, with character n-grams, (x, mask,
        grams)."""
        return (self.x, self.mask) if self.grams is None else (self.x, self.mask, self.grams)


@dataclass
class _Split:
    texts: list[str]
    ids: list[list[int]]
    y: list[int] = field(default_factory=list)
    grams: list[list[tuple[int, ...]]] | None = None  # per word, with task.char_ngrams


@TASKS.register("classify", ClassifyConfig)
class ClassificationTask(Task):
    """Sentence classification scored by accuracy (MR: 10-fold cross-validation)."""

    pad_id = PAD_ID
    inference_methods = ("predict",)

    # ------------------------------------------------------------------ data

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        self._fresh = tokenizer_state is None
        self._data: dict[str, _Split] | None = None
        self._data_error: DataError | None = None
        self.embedding_coverage: float | None = None
        self.lm_transfer: Any = None
        if tokenizer_state is None:
            raw = self._read()
            labels = sorted({label for pairs in raw.values() for _, label in pairs})
            if len(labels) < 2:
                raise DataError(f"the data has {len(labels)} label(s); a classifier needs >= 2")
            tokens = [self.tokenize(t) for t, _ in raw["train"]]
            self.vocab = Vocab.build(tokens, self.cfg.min_freq, self.cfg.max_vocab)
            self.labels = labels
        else:
            self._restore(tokenizer_state)
            try:
                raw = self._read()
            except DataError as exc:  # loading a checkpoint to predict needs no data
                self._data_error = exc
                return
        self._data = {split: self._encode(pairs, split) for split, pairs in raw.items()}

    def _file(self, name: str) -> Path:
        """A configured path: as given, else under the data folder."""
        return resolve_path(name, self.data_dir)

    def _read(self) -> dict[str, list[tuple[str, str]]]:
        """(text, label) pairs of train / valid / test."""
        cfg = self.cfg
        if cfg.data == "mr":
            pairs = read_mr(locate_mr(self.data_dir), cfg.encoding or "cp1252")
        else:
            pairs = read_label_tsv(self._file(cfg.path), cfg.encoding or "utf-8")
        labels = [label for _, label in pairs]
        if cfg.test_path is not None:
            test = read_label_tsv(self._file(cfg.test_path), cfg.encoding or "utf-8")
            index = holdout(labels, np.arange(len(pairs)), cfg.valid_fraction, cfg.split_seed)
            raw = {"test": test}
        else:
            index = cv_split(labels, cfg.fold, cfg.n_folds, cfg.split_seed, cfg.valid_fraction)
            raw = {"test": [pairs[i] for i in index["test"]]}
        raw["train"] = [pairs[i] for i in index["train"]]
        raw["valid"] = [pairs[i] for i in index["valid"]]
        if cfg.refit:  # select-then-refit: the validation part trains too
            raw["train"] = raw["train"] + raw["valid"]
        if not raw["train"] or not raw["valid"]:
            raise DataError(
                f"too few examples ({len(pairs)}) for a train and a validation part",
                hint="add examples or raise task.valid_fraction",
            )
        return {k: raw[k] for k in ("train", "valid", "test")}

    def tokenize(self, text: str) -> list[str]:
        """Words of ``text`` (:func:`clean_str` or whitespace), cut to ``max_len``."""
        if self.cfg.clean == "kim2014":
            words = clean_str(text, self.cfg.lowercase)
        else:
            words = (text.lower() if self.cfg.lowercase else text).split()
        return words[: self.cfg.max_len]

    def encode_text(self, text: str) -> list[int]:
        """Word ids of ``text``; a text without words becomes one ``<unk>``."""
        return self.vocab.encode(self.tokenize(text)) or [UNK_ID]

    def texts_grams(self, texts: list[str]) -> list[list[tuple[int, ...]]] | None:
        """Per text, each word's character n-gram ids (one entry per id of
        :meth:`encode_text`); None without ``char_ngrams``."""
        cfg = self.cfg
        if not cfg.char_ngrams:
            return None
        n_min, n_max, buckets = cfg.char_ngram_min, cfg.char_ngram_max, cfg.char_ngrams
        return [
            [gram_ids(w, n_min, n_max, buckets) for w in self.tokenize(t)] or [()] for t in texts
        ]

    def _encode(self, pairs: list[tuple[str, str]], split: str) -> _Split:
        index = {label: i for i, label in enumerate(self.labels)}
        unknown = sorted({label for _, label in pairs} - set(index))
        if unknown:
            raise DataError(
                f"{split} labels {unknown} are not among the model's labels {self.labels}",
                hint="use the data the checkpoint was trained with",
            )
        texts = [t for t, _ in pairs]
        ids = [self.encode_text(t) for t in texts]
        y = [index[label] for _, label in pairs]
        return _Split(texts, ids, y, self.texts_grams(texts))

    def tokenizer_state(self) -> dict[str, Any]:
        return {"vocab": self.vocab.to_dict(), "labels": list(self.labels)}

    def _restore(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or "vocab" not in state or "labels" not in state:
            raise DataError(
                "the saved tokenizer state is not a classify task's (needs vocab and labels)",
                hint="load the checkpoint with the config it was saved with",
            )
        self.vocab = Vocab.from_dict(state["vocab"])
        self.labels = [str(label) for label in state["labels"]]

    @property
    def splits(self) -> dict[str, _Split]:
        """train / valid / test: texts, word ids, label ids (raises when the data was not
        found while restoring a checkpoint)."""
        if self._data is None:
            assert self._data_error is not None
            raise self._data_error
        return self._data

    # ------------------------------------------------------------------ training

    def model_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "vocab": len(self.vocab),
            "n_classes": len(self.labels),
            "pad_id": PAD_ID,
        }
        if self._fresh and self.cfg.embeddings_path is not None:
            kwargs["embedding_init"] = self._init_embedding
        if self.cfg.char_ngrams:
            kwargs["gram_buckets"] = self.cfg.char_ngrams
        return kwargs

    def _init_embedding(self, embedding: nn.Module) -> float:
        """Copy ``embeddings_path`` vectors into ``embedding`` (at the start of a run)."""
        from seqlab.data.word_vectors_io import init_embedding  # the embeddings issue's loader

        path = self._file(str(self.cfg.embeddings_path))
        with torch.no_grad():
            coverage = float(init_embedding(embedding, self.vocab, path))
        self.embedding_coverage = coverage
        log.info("embeddings %s cover %.1f%% of the vocabulary", path, 100 * coverage)
        return coverage

    def init_model(self, model: nn.Module) -> None:
        """At the start of a run: a model that learns statistics of the training split
        (``fit_log_count_ratio``, the ``nbsvm`` model) gets them; with ``init_lm`` the
        LM's weights are copied in."""
        if not self._fresh:
            return
        fit = getattr(model, "fit_log_count_ratio", None)
        if fit is not None:
            fit(self._train_batches())
        if self.cfg.init_lm is None:
            return
        from seqlab.api import load  # the api imports the tasks
        from seqlab.data.tokenizers import WordTokenizer
        from seqlab.models.lm_transfer import transfer_lm

        path = self._file(str(self.cfg.init_lm))
        try:
            with torch.random.fork_rng(devices=[]):  # building the LM must not move our seed
                lm = load(path, data_dir=self.data_dir)
        except SeqlabError as exc:
            raise ConfigError(f"task.init_lm: {exc}") from None
        tokenizer = getattr(lm.task, "tokenizer", None)
        if not isinstance(tokenizer, WordTokenizer):
            raise ConfigError(
                f"task.init_lm: {path} is not a word-level language model run"
                " — train one with task: lm, level: word, model: rnn_lm"
            )
        self.lm_transfer = transfer_lm(model, self.vocab.tokens, lm.model, tokenizer.vocab.tokens)
        log.info(
            "init_lm %s: %d of %d recurrent cells, %.1f%% of the vocabulary",
            path,
            self.lm_transfer.cells,
            self.lm_transfer.total_cells,
            100 * self.lm_transfer.coverage,
        )

    def _train_batches(self) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor | None]]:
        """The training split as (x, mask, y, grams) batches of ``eval_batch_size``, in
        order (grams None without ``char_ngrams``)."""
        data, size = self.splits["train"], self.cfg.eval_batch_size
        for start in range(0, len(data.ids), size):
            part = slice(start, start + size)
            grams = None if data.grams is None else data.grams[part]
            b = self._batch(data.ids[part], data.y[part], grams)
            yield b.x, b.mask, b.y, b.grams

    def train_lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.splits["train"].ids], dtype=np.int64)

    def _batch(
        self, ids: list[list[int]], y: list[int], grams: list[list[tuple[int, ...]]] | None = None
    ) -> ClassBatch:
        x, lengths = pad_batch(ids, PAD_ID)  # (B, T), (B,)
        mask = padding_mask(lengths, x.shape[1])  # (B, T)
        g = None if grams is None else pad_gram_ids(grams, x.shape[1])  # (B, T, G)
        return ClassBatch(x, mask, torch.tensor(y, dtype=torch.long), len(ids), g)

    def collate(self, indices: list[int], split: str = "train") -> ClassBatch:
        data = self.splits[split]
        grams = None if data.grams is None else [data.grams[i] for i in indices]
        return self._batch([data.ids[i] for i in indices], [data.y[i] for i in indices], grams)

    def loss(self, model: nn.Module, batch: ClassBatch, label_smoothing: float = 0.0) -> LossOutput:
        """Σ_b CE(softmax(logits_b), y_b) (label-smoothed when ε > 0), in fp32."""
        logits = model(*batch.model_inputs()).float()  # (B, C)
        ls = label_smoothing
        loss_sum = F.cross_entropy(logits, batch.y, reduction="sum", label_smoothing=ls)  # ()
        nll_sum = F.cross_entropy(logits.detach(), batch.y, reduction="sum")  # ()
        return LossOutput(loss_sum, nll_sum, batch.n_tokens)

    # ------------------------------------------------------------------ evaluation

    def _logits(
        self,
        model: nn.Module,
        ids: list[list[int]],
        grams: list[list[tuple[int, ...]]] | None = None,
    ) -> Tensor:
        """Logits of every sentence, in input order, batched by length.  -> (N, C)."""
        device = next(model.parameters()).device
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = torch.empty(len(ids), len(self.labels))  # (N, C)
        step = self.cfg.eval_batch_size
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            g = None if grams is None else [grams[i] for i in rows]
            batch = self._batch([ids[i] for i in rows], [0] * len(rows), g).to(device)  # (B, T)
            out[rows] = model(*batch.model_inputs()).float().cpu()  # (B, C)
        return out

    @torch.no_grad()
    def split_logits(self, model: nn.Module, split: str = "valid") -> tuple[Tensor, Tensor]:
        """Logits and gold class ids of every sentence of ``split``, in the split's order
        (the same for every model trained on the same fold: an ensemble averages rows).

        Shapes: returns logits (N, C), y (N,) long
        """
        aliases = {"val": "valid", "dev": "valid"}
        name = aliases.get(split, split)
        if name not in self.splits:
            raise SeqlabError(
                f"the classify task has no split {split!r}; it has: train, valid, test"
            )
        data = self.splits[name]
        was_training = model.training
        model.eval()
        try:
            logits = self._logits(model, data.ids, data.grams)  # (N, C)
        finally:
            model.train(was_training)
        return logits, torch.tensor(data.y, dtype=torch.long)  # (N, C), (N,)

    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """Mean cross-entropy ``loss`` and ``accuracy`` on ``split`` (train/valid/test)."""
        logits, y = self.split_logits(model, split)  # (N, C), (N,)
        return {
            "loss": float(F.cross_entropy(logits, y)),
            "accuracy": float((logits.argmax(-1) == y).float().mean()),
        }

    @torch.no_grad()
    def predict(self, model: nn.Module, texts: list[str]) -> list[dict[str, Any]]:
        """Label and class probabilities of raw sentences:
        ``[{"label": "pos", "probs": {"neg": 0.08, "pos": 0.92}}, …]``."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise SeqlabError(f"predict: text {i} must be a string, got {type(t).__name__}")
        if not texts:
            return []
        was_training = model.training
        model.eval()
        try:
            ids = [self.encode_text(t) for t in texts]
            probs = torch.softmax(self._logits(model, ids, self.texts_grams(texts)), -1)  # (N, C)
        finally:
            model.train(was_training)
        out = []
        for row in probs.tolist():
            best = max(range(len(row)), key=row.__getitem__)
            out.append({"label": self.labels[best], "probs": dict(zip(self.labels, row))})
        return out
