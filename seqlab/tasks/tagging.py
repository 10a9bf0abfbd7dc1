"""Sequence tagging (named entities): CoNLL-2003 or any CoNLL-format files, a BiLSTM(-CRF)
tagger, entity-level F1 with seqeval (docs/tagging.md).

Pipeline:

1. Read the splits with the validated CoNLL reader (``seqlab.data.conll``; IOB2, or IOB1
   converted to IOB2).
2. Vocabularies from the **train** split only: words (optionally lower-cased, digits → 0
   as Lample et al. 2016, at least ``word_min_freq`` occurrences), characters of the raw
   tokens, and the tag set (CoNLL-2003's nine tags in a fixed order). A checkpoint carries
   them (``tokenizer_state``), so it never re-reads the training file to rebuild.
3. Training batches: words (B, T), characters (B, T, W), tags (B, T), mask (B, T). With
   ``unk_replace`` p, each training word seen once is replaced by ⟨unk⟩ with probability p
   (Lample §4: so the ⟨unk⟩ embedding is trained on the words test sentences lack).
4. Loss: per-sentence −log p(y | x) (CRF NLL, or the sum of token cross-entropies),
   summed; the Trainer divides by the batch's tokens (``normalize=token``) or sentences
   (``normalize=sentence``).
5. ``evaluate``: decode (Viterbi / argmax), then entity-level precision, recall and F1 by
   seqeval (``mode=default`` is conlleval's reading, the number papers report;
   ``strict`` counts only well-formed IOB2 entities), per type, in percent.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.data.collate import pad_batch
from seqlab.data.conll import (
    CONLL2003_FILES,
    CONLL2003_TAGS,
    Sentence,
    entity_spans,
    locate_conll2003,
    read_conll,
)
from seqlab.data.embedding_corpus import corpus_spelling
from seqlab.data.readers import resolve_path
from seqlab.data.vocab import PAD_ID, SPECIALS, UNK_ID, Vocab
from seqlab.errors import DataError, SeqlabError
from seqlab.nn.masks import padding_mask
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task

if TYPE_CHECKING:
    from seqlab.data.word_vectors_io import WordVectors

__all__ = ["TagBatch", "TaggingConfig", "TaggingTask", "tokenize"]

log = logging.getLogger("seqlab.tasks")

_STATE_FORMAT, _STATE_VERSION = "seqlab.tagging", 1
# Abbreviations (U.S.), numbers and dates (1,000.5  1996-08-22), words with inner
# hyphens/apostrophes (York-based, don't), then any other single symbol.
_TOKEN = re.compile(r"(?:[A-Za-z]\.){2,}|\d+(?:[.,:/-]\d+)*|\w+(?:['’-]\w+)*|[^\w\s]")


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Split raw text at whitespace and punctuation: (token, char start, char end)."""
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


@dataclass(frozen=True)
class TaggingConfig:
    """Data and evaluation settings of the tagging task.

    ``data``: ``conll2003`` (``<data_dir>/conll2003/{train,valid,test}.txt.gz``) or
    ``files`` (``train_path``, ``valid_path``, optional ``test_path``, CoNLL format with
    the tag in ``tag_column``). ``embeddings_path``: word vectors for the word embedding
    (``seqlab.data.word_vectors_io``), read when training starts, never when loading.
    ``embeddings_vocab``: ``train`` keeps the vocabulary of the train split; ``extend``
    also adds every word of the vector file (Lample et al. 2016's practice), so a valid or
    test word never seen in train but known to the vectors keeps its vector instead of
    becoming ⟨unk⟩; such words are looked up as the file spells them (lower-cased,
    numbers as ``<num>``) when their own spelling is not in the vocabulary.
    """

    data: Literal["conll2003", "files"] = "conll2003"
    train_path: str | None = None
    valid_path: str | None = None
    test_path: str | None = None
    n_columns: int | None = None
    tag_column: int = -1
    scheme: Literal["iob2", "iob1"] = "iob2"
    lowercase: bool = False
    digits_to_zero: bool = True
    word_min_freq: int = 1
    unk_replace: float = 0.0
    max_word_len: int = 30
    max_train_examples: int | None = None
    normalize: Literal["token", "sentence"] = "token"
    mode: Literal["default", "strict"] = "default"
    embeddings_path: str | None = None
    embeddings_vocab: Literal["train", "extend"] = "train"
    eval_max_tokens: int = 8000

    def __post_init__(self) -> None:
        paths = (self.train_path, self.valid_path)
        if self.data == "files" and None in paths:
            raise ValueError("task.data=files needs task.train_path and task.valid_path")
        if self.data == "conll2003" and any(p is not None for p in (*paths, self.test_path)):
            raise ValueError("file paths are set but task.data is 'conll2003': set data: files")
        for name in ("word_min_freq", "max_word_len", "eval_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.unk_replace <= 1.0:
            raise ValueError(f"task.unk_replace must be in [0, 1], got {self.unk_replace}")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError("task.max_train_examples must be >= 1 or null")
        if self.embeddings_vocab == "extend" and self.embeddings_path is None:
            raise ValueError("task.embeddings_vocab=extend needs task.embeddings_path")


@dataclass(frozen=True)
class TagBatch:
    """A padded batch of tagged sentences.

    Shapes:
        words (B, T) long, chars (B, T, W) long (PAD_ID after each word and at padded
        words), tags (B, T) long (0 at padding), mask (B, T) bool, True = real word;
        n_tokens: the loss normaliser (real words, or sentences with normalize=sentence)
    """

    words: Tensor
    chars: Tensor
    tags: Tensor
    mask: Tensor
    n_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TagBatch:
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
            for f in fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return TagBatch(**moved, n_tokens=self.n_tokens)


@TASKS.register("tag", TaggingConfig)
class TaggingTask(Task):
    """Named-entity (or any IOB) tagging, scored by entity-level F1 (seqeval)."""

    pad_id = PAD_ID
    inference_methods = ("predict", "tag")

    # ------------------------------------------------------------------ data

    def _paths(self) -> dict[str, Path]:
        cfg = self.cfg
        if cfg.data == "files":
            paths = {"train": cfg.train_path, "valid": cfg.valid_path, "test": cfg.test_path}
            return {k: resolve_path(v, self.data_dir) for k, v in paths.items() if v is not None}
        folder = locate_conll2003(self.data_dir)
        return {split: folder / name for split, name in CONLL2003_FILES.items()}

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        """Fresh training: read the files and build the vocabularies. From a checkpoint
        (``tokenizer_state``): restore them; the files are read only when a split is
        needed (training, ``evaluate``), so ``predict`` works without the data."""
        self._sentences: dict[str, list[Sentence]] | None = None
        self._ids: dict[str, tuple[list, list, list]] | None = None
        self._word_init: Callable[[nn.Module], float] | None = None
        if tokenizer_state is not None:
            self._restore(tokenizer_state)
            return
        tagset = CONLL2003_TAGS if self.cfg.data == "conll2003" else None
        self._build_vocabularies(tagset)
        if self.cfg.embeddings_path is not None:
            from seqlab.data.word_vectors_io import load_word2vec_text  # lazy

            vectors = load_word2vec_text(resolve_path(self.cfg.embeddings_path, self.data_dir))
            if self.cfg.embeddings_vocab == "extend":
                self._extend_vocabulary(vectors.words)
            self._word_init = self._make_word_init(vectors)

    @property
    def sentences(self) -> dict[str, list[Sentence]]:
        """The splits as read from the files (``train`` cut to ``max_train_examples``)."""
        if self._sentences is None:
            cfg = self.cfg
            conll = cfg.data == "conll2003"
            self._sentences = {
                split: read_conll(
                    path,
                    n_columns=4 if conll else cfg.n_columns,
                    tag_column=cfg.tag_column,
                    tagset=CONLL2003_TAGS if conll else None,
                    scheme=cfg.scheme,
                )
                for split, path in self._paths().items()
            }
            if cfg.max_train_examples is not None:
                train = self._sentences["train"][: cfg.max_train_examples]
                self._sentences["train"] = train
        return self._sentences

    @property
    def ids(self) -> dict[str, tuple[list, list, list]]:
        """Per split: word ids, char ids and tag ids of every sentence."""
        if self._ids is None:
            self._ids = {
                split: self._encode(sents, split) for split, sents in self.sentences.items()
            }
            counts = Counter(w for s in self._ids["train"][0] for w in s)
            singleton = torch.zeros(len(self.words), dtype=torch.bool)  # (V,)
            singleton[[w for w, c in counts.items() if c == 1 and w != UNK_ID]] = True
            self.singleton = singleton  # (V,) words seen once in train (unk_replace)
        return self._ids

    def normalise_word(self, token: str) -> str:
        """The word-vocabulary key of a token (lower-cased, digits → 0, as configured)."""
        if self.cfg.lowercase:
            token = token.lower()
        return re.sub(r"\d", "0", token) if self.cfg.digits_to_zero else token

    def word_id(self, token: str) -> int:
        """The token's word id: its key (:meth:`normalise_word`); in an ``extend``-ed
        vocabulary, failing that, the vector file's spelling (``<num>`` or lower case)."""
        i = self.words.token_to_id(self.normalise_word(token))
        if i == UNK_ID and self.cfg.embeddings_vocab == "extend":
            i = self.words.token_to_id(corpus_spelling(token))
        return i

    def _extend_vocabulary(self, file_words: list[str]) -> None:
        """Append the vector file's words the train vocabulary lacks (ids after train's)."""
        added = [w for w in file_words if w not in self.words and w not in SPECIALS]
        self.words = Vocab([*self.words.tokens[len(SPECIALS) :], *added])
        log.info("added %d words of the vector file to the vocabulary", len(added))

    def _build_vocabularies(self, tagset: tuple[str, ...] | None) -> None:
        train = self.sentences["train"]
        words = Counter(self.normalise_word(t) for s in train for t in s.tokens)
        self.words = Vocab.from_counts(words, min_freq=self.cfg.word_min_freq)
        self.chars = Vocab.from_counts(Counter(c for s in train for t in s.tokens for c in t))
        if tagset is None:
            seen = {t for split in self.sentences.values() for s in split for t in s.tags}
            tagset = ("O", *sorted(seen - {"O"}, key=lambda t: (t[2:], t[0])))
        self.tags: tuple[str, ...] = tuple(tagset)

    def _make_word_init(self, vectors: WordVectors) -> Callable[[nn.Module], float]:
        from seqlab.data.word_vectors_io import init_embedding  # lazy: only when asked for

        path = self.cfg.embeddings_path

        def word_init(module: nn.Module) -> float:
            coverage = float(init_embedding(module, self.words, vectors))
            log.info("word vectors %s cover %.1f%% of the vocabulary", path, 100 * coverage)
            return coverage

        return word_init

    def tokenizer_state(self) -> dict[str, Any]:
        return {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "words": self.words.to_dict(),
            "chars": self.chars.to_dict(),
            "tags": list(self.tags),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise DataError(
                "the saved tokenizer state is not a tagging vocabulary",
                hint="load the checkpoint with the config it was saved with",
            )
        if state.get("version") != _STATE_VERSION:
            raise DataError(f"tagging vocabulary version {state.get('version')!r} unsupported")
        self.words = Vocab.from_dict(state["words"])
        self.chars = Vocab.from_dict(state["chars"])
        self.tags = tuple(state["tags"])

    def _encode(self, sentences: list[Sentence], split: str) -> tuple[list, list, list]:
        """Per sentence: word ids, per-word char ids (≤ max_word_len), tag ids."""
        tag_id = {t: i for i, t in enumerate(self.tags)}
        W = self.cfg.max_word_len
        words, chars, tags = [], [], []
        for s in sentences:
            unknown = [t for t in s.tags if t not in tag_id]
            if unknown:
                raise DataError(
                    f"tag {unknown[0]!r} ({split}) is not in the training tag set",
                    path=self._paths()[split],
                    line=s.line,
                    hint=f"the model knows: {', '.join(self.tags)}",
                )
            words.append([self.word_id(t) for t in s.tokens])
            chars.append([self.chars.encode(t[:W]) for t in s.tokens])
            tags.append([tag_id[t] for t in s.tags])
        return words, chars, tags

    def _split(self, split: str) -> str:
        name = {"val": "valid", "dev": "valid", "testa": "valid", "testb": "test"}.get(split, split)
        if name not in self.ids:
            raise DataError(
                f"the tagging task has no split {split!r}", hint=f"available: {', '.join(self.ids)}"
            )
        return name

    # ------------------------------------------------------------------ training

    def model_kwargs(self) -> dict[str, Any]:
        return {
            "n_words": len(self.words),
            "n_chars": len(self.chars),
            "tags": list(self.tags),
            "pad_id": PAD_ID,
            "word_init": self._word_init,
        }

    def train_lengths(self) -> np.ndarray:
        return np.array([len(w) for w in self.ids["train"][0]], dtype=np.int64)

    def _batch(self, words: list, chars: list, tags: list) -> TagBatch:
        w, lengths = pad_batch(words, PAD_ID)  # (B, T), (B,)
        mask = padding_mask(lengths, w.shape[1])  # (B, T)
        y, _ = pad_batch(tags, 0)  # (B, T)
        flat, _ = pad_batch([c for sent in chars for c in sent], PAD_ID)  # (N, W)
        c = flat.new_full((*w.shape, flat.shape[1]), PAD_ID)  # (B, T, W)
        c[mask] = flat  # (B, T, W) the real words get their characters
        n = int(lengths.sum()) if self.cfg.normalize == "token" else len(words)
        return TagBatch(w, c, y, mask, n)

    def collate(self, indices: list[int], split: str = "train") -> TagBatch:
        words, chars, tags = self.ids[self._split(split)]  # (also sets self.singleton)
        batch = self._batch(
            [words[i] for i in indices], [chars[i] for i in indices], [tags[i] for i in indices]
        )
        p = self.cfg.unk_replace
        if split == "train" and p > 0:
            drop = self.singleton[batch.words] & (torch.rand(batch.words.shape) < p)  # (B, T)
            batch = TagBatch(
                batch.words.masked_fill(drop & batch.mask, UNK_ID),
                batch.chars,
                batch.tags,
                batch.mask,
                batch.n_tokens,
            )
        return batch

    def loss(self, model: nn.Module, batch: TagBatch, label_smoothing: float = 0.0) -> LossOutput:
        P = model(batch.words, batch.chars, batch.mask)  # (B, T, K)
        nll = model.loss(P, batch.tags, batch.mask, label_smoothing)  # (B,)
        return LossOutput(nll.sum(), nll.detach().sum(), batch.n_tokens)

    # ------------------------------------------------------------------ evaluation

    def _eval_batches(self, n: int, lengths: list[int]) -> list[list[int]]:
        """Length-sorted index groups with B · max length ≤ eval_max_tokens."""
        order = sorted(range(n), key=lambda i: lengths[i])
        groups, cur = [], []
        for i in order:
            if cur and (len(cur) + 1) * lengths[i] > self.cfg.eval_max_tokens:
                groups.append(cur)
                cur = []
            cur.append(i)
        return groups + ([cur] if cur else [])

    def _decode(
        self, model: nn.Module, words: list, chars: list, tags: list | None = None
    ) -> tuple[list[list[str]], float, int]:
        """Predicted tag strings per sentence (input order), and Σ NLL / normaliser."""
        device = next(model.parameters()).device
        out: list[list[str]] = [[] for _ in words]
        nll, n = 0.0, 0
        gold = tags if tags is not None else [[0] * len(w) for w in words]
        for group in self._eval_batches(len(words), [len(w) for w in words]):
            batch = self._batch(
                [words[i] for i in group], [chars[i] for i in group], [gold[i] for i in group]
            ).to(device)
            P = model(batch.words, batch.chars, batch.mask)  # (B, T, K)
            if tags is not None:
                nll += float(model.loss(P, batch.tags, batch.mask).sum())
                n += batch.n_tokens
            pred = model.decode(P, batch.mask).cpu().tolist()  # (B, T)
            for i, row in zip(group, pred):
                out[i] = [self.tags[k] for k in row[: len(words[i])]]
        return out, nll, n

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """loss, token accuracy and entity precision / recall / F1 (overall and per type,
        ``f1_PER`` …), all in percent except the loss."""
        from seqeval.metrics import classification_report
        from seqeval.scheme import IOB2

        split = self._split(split)
        words, chars, tags = self.ids[split]
        was_training = model.training
        model.eval()
        try:
            hyp, nll, n = self._decode(model, words, chars, tags)
        finally:
            model.train(was_training)
        ref = [list(s.tags) for s in self.sentences[split]]
        strict = {"mode": "strict", "scheme": IOB2} if self.cfg.mode == "strict" else {}
        report = classification_report(ref, hyp, output_dict=True, zero_division=0, **strict)
        micro = report["micro avg"]
        correct = sum(h == r for hs, rs in zip(hyp, ref) for h, r in zip(hs, rs))
        metrics = {
            "loss": nll / max(n, 1),
            "f1": 100.0 * float(micro["f1-score"]),
            "precision": 100.0 * float(micro["precision"]),
            "recall": 100.0 * float(micro["recall"]),
            "accuracy": 100.0 * correct / max(sum(map(len, ref)), 1),
        }
        kinds = sorted({t[2:] for t in self.tags if t != "O"})
        for kind in kinds:
            metrics[f"f1_{kind}"] = 100.0 * float(report.get(kind, {}).get("f1-score", 0.0))
        return metrics

    # ------------------------------------------------------------------ inference

    @torch.no_grad()
    def tag(self, model: nn.Module, sentences: list[list[str]]) -> list[list[str]]:
        """Tags of pre-tokenised sentences: ``tag(model, [["EU", "rejects"]])``."""
        if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
            raise SeqlabError("tag() takes a list of token lists, e.g. [['EU', 'rejects']]")
        keep = [i for i, s in enumerate(sentences) if len(s)]
        W = self.cfg.max_word_len
        words = [[self.word_id(t) for t in sentences[i]] for i in keep]
        chars = [[self.chars.encode(t[:W]) for t in sentences[i]] for i in keep]
        was_training = model.training
        model.eval()
        try:
            tagged = self._decode(model, words, chars)[0] if keep else []
        finally:
            model.train(was_training)
        out: list[list[str]] = [[] for _ in sentences]
        for i, tags in zip(keep, tagged):
            out[i] = tags
        return out

    def predict(self, model: nn.Module, texts: list[str]) -> list[dict[str, Any]]:
        """Raw sentences → one dict each: ``text``, ``tokens``, ``tags`` and ``entities``
        (``type``, token ``start``/``end`` (end exclusive), ``text`` as written, and
        ``char_start``/``char_end`` in the input)."""
        if isinstance(texts, str):
            raise SeqlabError("predict() takes a list of sentences, e.g. [text]")
        pieces = [tokenize(text) for text in texts]
        tagged = self.tag(model, [[p[0] for p in ps] for ps in pieces])
        results = []
        for text, ps, tags in zip(texts, pieces, tagged):
            entities = []
            for kind, start, end in entity_spans(tags):
                a, b = ps[start][1], ps[end - 1][2]
                entities.append(
                    {
                        "type": kind,
                        "start": start,
                        "end": end,
                        "text": text[a:b],
                        "char_start": a,
                        "char_end": b,
                    }
                )
            results.append(
                {"text": text, "tokens": [p[0] for p in ps], "tags": tags, "entities": entities}
            )
        return results
