"""Pointer tasks: the planar convex hull (Vinyals, Fortunato & Jaitly 2015, §4.2) and
sorting numbers ("Order Matters", Vinyals, Bengio & Kudlur 2016, §4.4).

Generated data (``seqlab.data.geometry``, seeded, no files): n input vectors → a sequence
of input indices. Two ways to feed a model, chosen by ``input``:

* ``vectors`` (for ``pointer_net``): the float vectors P_j themselves; outputs are the
  positions 1 … n, position 0 = END (``seqlab.models.pointer_net``). y_in = ⇒ C_1 … C_m,
  y_out = C_1 … C_m ⇐; targets are padded with −1 (ignored by the loss).
* ``tokens`` (the seq2seq-with-attention baseline, e.g. ``bahdanau``): every coordinate is
  quantised into ``bins`` bins and becomes one source token (D tokens per point, the x
  and y bins have distinct ids); the output position j (1-based) is the target token
  ``N_SPECIAL + j − 1``, so the output vocabulary is fixed at n_max = max(n, test_n).
  This is the paper's "LSTM + attention" baseline, which must learn a fixed dictionary
  of positions; it cannot emit a position it never saw in training.

Metrics (``evaluate``): ``exact`` = fraction of examples whose decoded index sequence
equals the target exactly (canonical order: sort ascending; hull counter-clockwise from
the smallest index on the hull). Hull only: ``coverage`` = mean over examples of
area(predicted polygon ∩ true hull) / area(true hull), 0 for an invalid polygon (fewer
than 3 vertices, a repeated or out-of-range index, crossing edges); since the predicted
vertices are input points, a valid polygon lies inside the hull and its coverage is
|A(predicted)| / A(hull) (shoelace; ``geometry.hull_coverage``); ``valid`` = fraction of
valid polygons. ``loss`` = teacher-forced NLL per output position (END included).
Split ``valid`` has the training n; split ``test`` evaluates every n in ``test_n``
(keys ``exact_n10``, ``coverage_n10``, …).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq
from seqlab.data.geometry import INPUT_DIM, Example, hull_coverage, make_examples
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.decode.greedy import greedy
from seqlab.errors import SeqlabError
from seqlab.models.pointer_net import END
from seqlab.nn.masks import padding_mask
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task, token_cross_entropy

N_SPECIAL = 4  # <pad> <unk> <s> </s>
POS_PAD = -1  # target padding of the position outputs (position 0 is END)


@dataclass(frozen=True)
class PointerTaskConfig:
    """``problem``: sort (D = 1) or hull (D = 2). Training n is drawn uniformly from
    [n_min, n] (``n_min`` None: exactly n); ``test_n``: the n of the test sets.
    ``input``: ``vectors`` (pointer_net) or ``tokens`` (a seq2seq baseline, coordinates in
    ``bins`` bins). ``beam_size`` 1 = greedy decoding in ``evaluate``."""

    problem: Literal["sort", "hull"] = "hull"
    n: int = 10
    n_min: int | None = None
    test_n: tuple[int, ...] = (5, 10, 50)
    n_train: int = 100_000
    n_valid: int = 1000
    n_test: int = 1000
    input: Literal["vectors", "tokens"] = "vectors"
    bins: int = 100
    beam_size: int = 1
    eval_batch: int = 128
    data_seed: int = 1234

    def __post_init__(self) -> None:
        least = 3 if self.problem == "hull" else 1
        if self.problem not in INPUT_DIM:
            raise ConfigError(f"task.problem must be 'sort' or 'hull', got {self.problem!r}")
        if self.n < least:
            raise ConfigError(f"task.n must be >= {least} for {self.problem}, got {self.n}")
        if self.n_min is not None and not least <= self.n_min <= self.n:
            raise ConfigError(f"task.n_min must be in [{least}, n={self.n}], got {self.n_min}")
        if not self.test_n or min(self.test_n) < least:
            raise ConfigError(f"task.test_n must be values >= {least}, got {self.test_n}")
        for name in ("n_train", "n_valid", "n_test", "beam_size", "eval_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if self.bins < 2:
            raise ConfigError(f"task.bins must be >= 2, got {self.bins}")
        if self.input not in ("vectors", "tokens"):
            raise ConfigError(f"task.input must be 'vectors' or 'tokens', got {self.input!r}")


@dataclass(frozen=True)
class PointerBatch:
    """A padded batch of input vectors and position targets (``input=vectors``).

    Shapes:
        src (B, S, D) float, 0 at padding; src_mask (B, S) bool
        y_in (B, T) long: END(⇒), C_1+1 … C_m+1, then END; y_out (B, T) long: C_1+1 …
        C_m+1, END, then −1; tgt_mask (B, T) bool; n_tokens = Σ_b (m_b + 1)
    """

    src: Tensor
    src_mask: Tensor
    y_in: Tensor
    y_out: Tensor
    tgt_mask: Tensor
    n_tokens: int

    @property
    def batch_size(self) -> int:
        return int(self.src.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PointerBatch:
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **moved)


def collate_pointer(examples: list[Example]) -> PointerBatch:
    """Pad (points, 0-based target) examples into a ``PointerBatch`` (positions 1-based)."""
    if not examples:
        raise ValueError("collate_pointer needs at least one example")
    n = torch.tensor([len(p) for p, _ in examples])  # (B,)
    m = torch.tensor([len(c) for _, c in examples])  # (B,)
    B, S, T, D = len(examples), int(n.max()), int(m.max()) + 1, examples[0][0].shape[1]
    src = torch.zeros(B, S, D)  # (B, S, D)
    y_in = torch.full((B, T), END, dtype=torch.long)  # (B, T)
    y_out = torch.full((B, T), POS_PAD, dtype=torch.long)  # (B, T)
    for b, (points, target) in enumerate(examples):
        src[b, : len(points)] = torch.from_numpy(points)
        pos = torch.from_numpy(target) + 1  # (m_b,) 1-based positions
        y_in[b, 1 : len(pos) + 1] = pos
        y_out[b, : len(pos)] = pos
        y_out[b, len(pos)] = END
    return PointerBatch(
        src=src,
        src_mask=padding_mask(n, S),  # (B, S)
        y_in=y_in,
        y_out=y_out,
        tgt_mask=padding_mask(m + 1, T),  # (B, T)
        n_tokens=int((m + 1).sum()),
    )


def quantise(points: np.ndarray, bins: int) -> list[int]:
    """Source tokens of the seq2seq baseline: coordinate d of point j → the id
    N_SPECIAL + d·bins + ⌊P_jd · bins⌋ (clipped to the last bin), point by point.

    Shapes: points (n, D) in [0, 1) -> n·D ids
    """
    D = points.shape[1]
    k = np.clip(np.floor(points.astype(np.float64) * bins), 0, bins - 1).astype(np.int64)  # (n, D)
    ids = N_SPECIAL + np.arange(D)[None, :] * bins + k  # (n, D)
    return ids.reshape(-1).tolist()


@TASKS.register("pointer", PointerTaskConfig)
class PointerTask(Task):
    """Sort numbers or find the convex hull by pointing at input positions."""

    pad_id = PAD_ID
    inference_methods = ("predict",)

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        cfg = self.cfg
        lo = cfg.n if cfg.n_min is None else cfg.n_min
        # Not named ``splits``: ``test`` is not one list but one per n in test_n.
        self.data: dict[str, list[Example]] = {
            "train": make_examples(cfg.problem, cfg.n_train, lo, cfg.n, cfg.data_seed),
            "valid": make_examples(cfg.problem, cfg.n_valid, lo, cfg.n, cfg.data_seed + 1),
        }

    def examples(self, split: str) -> list[Example]:
        """``train``, ``valid`` or ``test_n<k>`` (generated on first use, seed + 2 + k)."""
        if split not in self.data:
            tail = split[len("test_n") :] if split.startswith("test_n") else ""
            k = int(tail) if tail.isdigit() else -1
            if k < (3 if self.cfg.problem == "hull" else 1):
                raise SeqlabError(
                    f"pointer task: unknown split {split!r}; use train, valid, test (every n "
                    f"in task.test_n) or test_n<k> (k points)"
                )
            seed = self.cfg.data_seed + 2 + k
            self.data[split] = make_examples(self.cfg.problem, self.cfg.n_test, k, k, seed)
        return self.data[split]

    @property
    def n_max(self) -> int:
        """The largest n the model may see (sizes the baseline's output vocabulary)."""
        return max(self.cfg.n, *self.cfg.test_n)

    def model_kwargs(self) -> dict[str, Any]:
        D = INPUT_DIM[self.cfg.problem]
        if self.cfg.input == "vectors":
            return {"input_dim": D}
        src_vocab = N_SPECIAL + D * self.cfg.bins
        return {"src_vocab": src_vocab, "tgt_vocab": N_SPECIAL + self.n_max, "pad_id": PAD_ID}

    def train_lengths(self) -> np.ndarray:
        D = INPUT_DIM[self.cfg.problem]
        per_point = 1 if self.cfg.input == "vectors" else D
        return np.array([per_point * len(p) + 1 for p, _ in self.data["train"]])

    def collate(self, indices: list[int], split: str = "train") -> PointerBatch | Seq2SeqBatch:
        data = self.examples(split)
        return self.collate_examples([data[i] for i in indices])

    def collate_examples(self, examples: list[Example]) -> PointerBatch | Seq2SeqBatch:
        if self.cfg.input == "vectors":
            return collate_pointer(examples)
        pairs = [(quantise(p, self.cfg.bins), (c + N_SPECIAL).tolist()) for p, c in examples]
        return collate_seq2seq(pairs, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)

    def loss(
        self, model: nn.Module, batch: PointerBatch | Seq2SeqBatch, label_smoothing: float = 0.0
    ) -> LossOutput:
        logits = model(batch.src, batch.src_mask, batch.y_in, batch.tgt_mask)  # (B, T, ·)
        if isinstance(batch, Seq2SeqBatch):
            return token_cross_entropy(logits, batch.y_out, PAD_ID, label_smoothing)
        if label_smoothing:
            raise SeqlabError(
                "pointer task: label smoothing over positions is not supported (masked "
                "positions have probability 0); set train.label_smoothing=0"
            )
        return token_cross_entropy(logits, batch.y_out, POS_PAD)

    # ------------------------------------------------------------------ decoding

    @torch.no_grad()
    def decode(
        self, model: nn.Module, examples: list[Example], beam: int | None = None
    ) -> list[np.ndarray]:
        """Decoded 0-based index sequences (END removed; −1 for a token that is not one
        of the example's inputs), greedy or beam (``beam``, default ``task.beam_size``), in
        batches of ``eval_batch``."""
        beam = self.cfg.beam_size if beam is None else beam
        device = next(model.parameters()).device
        vectors = self.cfg.input == "vectors"
        bos, eos, pad = (END, END, POS_PAD) if vectors else (BOS_ID, EOS_ID, PAD_ID)
        out: list[np.ndarray] = []
        for start in range(0, len(examples), self.cfg.eval_batch):
            chunk = examples[start : start + self.cfg.eval_batch]
            batch = self.collate_examples(chunk).to(device)
            memory = model.encode(batch.src, batch.src_mask)
            state = model.init_state(memory, batch.src_mask)
            max_len = max(len(p) for p, _ in chunk) + 1
            B = len(chunk)
            if beam == 1:
                tokens = greedy(model, state, B, bos, eos, max_len, pad_id=pad).tokens  # (B, T)
            else:
                result = beam_search(model, state, B, bos, eos, max_len, beam_size=beam, pad_id=pad)
                tokens = result.tokens[:, 0]  # (B, T) the best hypothesis
            first = 1 if vectors else N_SPECIAL  # the id of input 0
            for row, (points, _) in zip(tokens.tolist(), chunk):
                ids = row[: row.index(eos)] if eos in row else [t for t in row if t != pad]
                pos = [t - first if first <= t < first + len(points) else -1 for t in ids]
                out.append(np.array(pos, dtype=np.int64))
        return out

    @torch.no_grad()
    def metrics(self, model: nn.Module, examples: list[Example]) -> dict[str, float]:
        """exact, (hull) coverage and valid, and the teacher-forced loss on ``examples``."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        nll, n_tok = 0.0, 0
        for start in range(0, len(examples), self.cfg.eval_batch):
            batch = self.collate_examples(examples[start : start + self.cfg.eval_batch])
            out = self.loss(model, batch.to(device))
            nll, n_tok = nll + float(out.nll_sum), n_tok + out.n_tokens
        predicted = self.decode(model, examples)
        model.train(was_training)
        exact = [np.array_equal(p, c) for p, (_, c) in zip(predicted, examples)]
        result = {"loss": nll / n_tok, "exact": float(np.mean(exact))}
        if self.cfg.problem == "hull":
            cov = [hull_coverage(x, p, c) for p, (x, c) in zip(predicted, examples)]
            result["coverage"] = float(np.mean(cov))
            result["valid"] = float(np.mean([c > 0 for c in cov]))
        return result

    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """``valid`` (training n) or ``test`` (every n in test_n, keys suffixed _n<k>)."""
        if split != "test":
            return self.metrics(model, self.examples(split))
        out: dict[str, float] = {}
        for k in self.cfg.test_n:
            for name, value in self.metrics(model, self.examples(f"test_n{k}")).items():
                out[f"{name}_n{k}"] = value
        return out

    def predict(self, model: nn.Module, inputs: list[Any]) -> list[list[int]]:
        """0-based output indices for raw inputs: sort takes lists of numbers in [0, 1),
        hull lists of (x, y) points in [0, 1)².

        ``predict(model, [[0.3, 0.1, 0.2]])`` → ``[[1, 2, 0]]`` for a trained sorter.
        """
        D = INPUT_DIM[self.cfg.problem]
        examples: list[Example] = []
        for i, item in enumerate(inputs):
            points = np.asarray(item, dtype=np.float32).reshape(len(item), -1)
            if points.shape[0] < 1 or points.shape[1] != D:
                raise SeqlabError(
                    f"predict: input {i} must be a non-empty list of "
                    f"{'numbers' if D == 1 else '(x, y) points'}, got shape {points.shape}"
                )
            examples.append((points, np.zeros(0, dtype=np.int64)))
        if not examples:
            return []
        was_training = model.training
        model.eval()
        result = [p.tolist() for p in self.decode(model, examples)]
        model.train(was_training)
        return result
