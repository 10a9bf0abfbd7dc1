"""Language modelling: word level (Penn Treebank) or character level (Tiny Shakespeare, any
text), trained by truncated BPTT over a contiguous stream (docs/lm.md).

* Data: ``seqlab.data.lm_corpus`` reads the corpus; the vocabulary is built from the
  training split (word: every word, or those seen ``min_freq`` times; char: every
  character) or restored from a checkpoint, which then needs no data to generate/score.
* Batches: the stream is cut into ``batch_size`` contiguous rows (× world size) and read
  in chunks of ``bptt`` tokens (``StreamBatcher``). With ``carry_state`` the model's final
  state for a chunk is detached and becomes the initial state of the next chunk; it is
  reset (``None``) at the first chunk of every epoch, and stored in step checkpoints
  (``state_tensors`` / ``load_state_tensors``), so a resumed run equals an uninterrupted
  one bitwise. A model whose forward returns state None (the Transformer LM) carries
  nothing.
* Loss: Σ_t −log p(y⟨t⟩ | y⟨<t⟩) over every position (``token_cross_entropy``).
* ``evaluate``: the split read the same way with ``eval_batch_size`` rows, the state
  carried through the whole split; metrics from ``seqlab.eval.perplexity``: word level
  ``loss`` (nats/token) and ``ppl``; char level ``loss`` = ``nats_per_char`` and ``bpc``.
* ``generate`` (sampling through ``seqlab.decode.sampling``) and ``score`` (log P of a
  sentence and every token's probability) are in ``seqlab.tasks.lm_infer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.data.lm_corpus import (
    LMCorpus,
    StreamBatcher,
    batchify,
    chunk,
    n_chunks,
    read_ptb,
    read_text_corpus,
    read_tiny_shakespeare,
)
from seqlab.data.readers import resolve_path
from seqlab.data.tokenizers import CharTokenizer, Tokenizer, WordTokenizer
from seqlab.data.vocab import PAD_ID, Vocab
from seqlab.errors import DataError
from seqlab.eval.perplexity import lm_metrics
from seqlab.models.lm_common import detach_state, fill_state, state_tensors
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task, token_cross_entropy
from seqlab.tasks.lm_infer import LMInference


@dataclass(frozen=True)
class LMTaskConfig:
    """Corpus, vocabulary and truncated-BPTT settings of the ``lm`` task.

    ``data``: ``ptb`` / ``shakespeare`` (from the data folder) or ``text`` (``path``, one
    UTF-8 file split by ``valid_fraction`` / ``test_fraction``; Tiny Shakespeare is split
    the same way). ``train.batch`` is not used: a batch is ``batch_size`` rows × ``bptt``
    tokens. ``random_offset``: start each epoch's stream at a random position in
    [0, bptt) (chunk boundaries move; see ``StreamBatcher``). ``max_train_tokens``: keep
    only the start of the training stream (smoke tests). ``embeddings_path``: word2vec
    text vectors (``seqlab embed train … --dim`` = the model's embedding width) copied into
    the token embedding at the start of a word-level run
    (``seqlab.tasks.pretrained_embeddings``; with tied weights the output layer too).
    """

    data: Literal["ptb", "shakespeare", "text"] = "ptb"
    level: Literal["word", "char"] = "word"
    path: str | None = None
    valid_fraction: float = 0.1
    test_fraction: float = 0.0
    min_freq: int = 1
    batch_size: int = 20
    bptt: int = 35
    eval_batch_size: int = 10
    carry_state: bool = True
    random_offset: bool = False
    max_train_tokens: int | None = None
    embeddings_path: str | None = None

    def __post_init__(self) -> None:
        if self.data == "text" and not self.path:
            raise ValueError("task.data=text needs task.path (a UTF-8 text file)")
        if self.data != "text" and self.path:
            raise ValueError(f"task.path is set but task.data is {self.data!r}: set data: text")
        for name in ("min_freq", "batch_size", "bptt", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.valid_fraction < 1.0 or not 0.0 <= self.test_fraction < 1.0:
            raise ValueError("need 0 < task.valid_fraction < 1 and 0 <= task.test_fraction < 1")
        if self.valid_fraction + self.test_fraction >= 1.0:
            raise ValueError("task.valid_fraction + task.test_fraction must be < 1")
        if self.max_train_tokens is not None and self.max_train_tokens < 2:
            raise ValueError("task.max_train_tokens must be >= 2 or null")
        if self.embeddings_path is not None and self.level != "word":
            raise ValueError(
                "task.embeddings_path holds word vectors: it needs task.level: word "
                f"(got {self.level!r})"
            )


@dataclass
class LMBatch:
    """One chunk of the stream.

    Shapes:
        x: (B, T) long, inputs y⟨t−1⟩      y: (B, T) long, targets y⟨t⟩
        index: the chunk's position in the epoch (0: the state restarts)
    """

    x: Tensor
    y: Tensor
    index: int

    @property
    def n_tokens(self) -> int:
        return self.y.numel()

    def to(self, device: torch.device | str) -> LMBatch:
        return LMBatch(self.x.to(device), self.y.to(device), self.index)


@TASKS.register("lm", LMTaskConfig)
class LMTask(LMInference, Task):
    """Word- or character-level language modelling with truncated BPTT."""

    pad_id = PAD_ID
    inference_methods = ("generate", "score", "explain")

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        self._corpus: LMCorpus | None = None
        self._ids: dict[str, Tensor] = {}
        self._carry: Any = None  # the training state carried to the next chunk
        self._pending: dict[str, Tensor] | None = None  # restored, filled in at next loss
        self._stream: StreamBatcher | None = None
        self._fresh = tokenizer_state is None
        self.embedding_coverage: float | None = None
        if tokenizer_state is not None:
            self.tokenizer = Tokenizer.from_state(tokenizer_state)
        else:
            train = self.corpus.splits["train"]
            if self.cfg.level == "char":
                self.tokenizer = CharTokenizer.train([train])
            else:
                vocab = Vocab.build([train], min_freq=self.cfg.min_freq)
                self.tokenizer = WordTokenizer(vocab)
        expected = CharTokenizer if self.cfg.level == "char" else WordTokenizer
        if not isinstance(self.tokenizer, expected):
            raise DataError(
                f"the checkpoint's tokenizer is {self.tokenizer.kind!r}, the task's level "
                f"is {self.cfg.level!r}"
            )

    # ------------------------------------------------------------------ data

    @property
    def corpus(self) -> LMCorpus:
        """The text splits, read on first use (generate / score need no data files)."""
        if self._corpus is None:
            cfg = self.cfg
            if cfg.data == "ptb":
                self._corpus = read_ptb(self.data_dir, cfg.level)
            elif cfg.data == "shakespeare":
                self._corpus = read_tiny_shakespeare(
                    self.data_dir, cfg.level, cfg.valid_fraction, cfg.test_fraction
                )
            else:
                self._corpus = read_text_corpus(
                    resolve_path(cfg.path, self.data_dir),
                    cfg.level,
                    cfg.valid_fraction,
                    cfg.test_fraction,
                )
        return self._corpus

    def ids(self, split: str) -> Tensor:
        """The split's token ids as one stream.  Shapes: (N,) long."""
        if split not in self._ids:
            splits = self.corpus.splits
            if split not in splits:
                raise DataError(
                    f"the corpus has no {split!r} split (it has {', '.join(splits)})",
                    hint="set task.test_fraction > 0 for a test split of a single file",
                )
            text = splits[split]
            tok = self.tokenizer
            if isinstance(tok, WordTokenizer):
                ids = tok.vocab.encode(text)
            else:
                ids = tok.encode(text)
            if split == "train" and self.cfg.max_train_tokens is not None:
                ids = ids[: self.cfg.max_train_tokens]
            self._ids[split] = torch.tensor(ids, dtype=torch.long)  # (N,)
        return self._ids[split]

    def model_kwargs(self) -> dict[str, Any]:
        return {"vocab": self.tokenizer.vocab_size, "pad_id": PAD_ID}

    def tokenizer_state(self) -> dict[str, Any] | None:
        return self.tokenizer.to_state()

    def init_model(self, model: nn.Module) -> None:
        """At the start of a run, ``embeddings_path``'s vectors into the token embedding."""
        if self._fresh and self.cfg.embeddings_path is not None:
            from seqlab.tasks.pretrained_embeddings import load_vectors

            assert isinstance(self.tokenizer, WordTokenizer)
            path = resolve_path(self.cfg.embeddings_path, self.data_dir)
            self.embedding_coverage = load_vectors(
                model, ("embed", "C"), self.tokenizer.vocab, path, "task.embeddings_path"
            )

    def train_lengths(self) -> np.ndarray:
        """Unused by the stream batcher; one "example" per training token."""
        return np.ones(self.ids("train").numel(), dtype=np.int64)

    def make_batcher(self, batch_cfg: Any, seed: int, rank: int, world_size: int) -> StreamBatcher:
        """The Trainer's batch order: contiguous chunks in order (``train.batch`` unused)."""
        cfg = self.cfg
        self._stream = StreamBatcher(
            self.ids("train").numel(),
            cfg.batch_size,
            cfg.bptt,
            rank,
            world_size,
            seed=seed,
            random_offset=cfg.random_offset,
        )
        self._grids: dict[int, Tensor] = {}
        return self._stream

    def _grid(self, offset: int) -> Tensor:
        """This rank's rows of the stream started at ``offset``.  Shapes: (B, n)."""
        if offset not in self._grids:
            stream = self._stream
            ids = self.ids("train")[offset:]  # (N − offset,)
            self._grids = {offset: batchify(ids, stream.rows)[stream.row_slice()]}  # (B, n)
        return self._grids[offset]

    def collate(self, indices: list[int], split: str = "train") -> LMBatch:
        """``[i, offset]`` (from the batcher) -> chunk i of this rank's training rows."""
        if split != "train" or self._stream is None:
            raise ValueError("the lm task batches only its training stream (call make_batcher)")
        i, offset = indices
        x, y = chunk(self._grid(offset), i, self.cfg.bptt)  # (B, T), (B, T)
        return LMBatch(x, y, i)

    # ------------------------------------------------------------------ state across chunks

    def state_tensors(self) -> dict[str, Tensor]:
        """The carried training state (CPU tensors by dotted name; {} for none)."""
        if self._pending is not None:
            return dict(self._pending)
        return {k: v.detach().cpu() for k, v in state_tensors(self._carry).items()}

    def load_state_tensors(self, tensors: dict[str, Tensor] | None) -> None:
        """Restore the carried state (shaped at the next ``loss`` from the model's
        ``init_state``); an empty dict means no state."""
        self._carry = None
        self._pending = dict(tensors) if tensors else None

    def reset_state(self) -> None:
        self._carry, self._pending = None, None

    def _state_for(self, model: nn.Module, batch: LMBatch) -> Any:
        if batch.index == 0 or not self.cfg.carry_state:
            self.reset_state()
        if self._pending is not None:
            inner = getattr(model, "module", model)  # DDP wraps the model
            template = inner.init_state(batch.x.size(0), batch.x.device)
            self._carry, self._pending = fill_state(template, self._pending), None
        return self._carry

    def loss(self, model: nn.Module, batch: LMBatch, label_smoothing: float = 0.0) -> LossOutput:
        out = model(batch.x, self._state_for(model, batch))
        if self.cfg.carry_state:
            self._carry = detach_state(out.state)
        return token_cross_entropy(out.logits, batch.y, PAD_ID, label_smoothing)

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def nll(self, model: nn.Module, split: str = "valid") -> tuple[float, int]:
        """(Σ −ln p, N) over a split read in ``eval_batch_size`` rows, state carried."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        grid = batchify(self.ids(split), self.cfg.eval_batch_size).to(device)  # (R, n)
        state, total, count = None, 0.0, 0
        for i in range(n_chunks(grid.size(1), self.cfg.bptt)):
            x, y = chunk(grid, i, self.cfg.bptt)  # (R, T)
            out = model(x, state)
            state = out.state if self.cfg.carry_state else None
            loss = token_cross_entropy(out.logits, y, PAD_ID)
            total += float(loss.nll_sum)
            count += loss.n_tokens
        model.train(was_training)
        return total, count

    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """word: loss (nats/token), ppl; char: loss = nats_per_char, bpc."""
        total, count = self.nll(model, split)
        return lm_metrics(total, count, self.cfg.level)
