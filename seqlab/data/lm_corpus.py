"""Language-modelling corpora and the contiguous-stream batches of truncated BPTT.

Corpora (``../shared/data``, described in its README.md):

* **Penn Treebank**, Mikolov's LM version (``ptb/ptb.{train,valid,test}.txt.gz``): word
  level, lower-cased, ``<unk>`` already in the text; ``</s>`` (seqlab's EOS, the "<eos>"
  of the usual recipes) is appended to every line, giving the standard 929,589 / 73,760 /
  82,430 tokens and a 10k vocabulary (+ seqlab's ``<pad>`` and ``<s>``, never seen).
* **Tiny Shakespeare** (``tinyshakespeare/input.txt``): character level, no official
  split. The default is nanoGPT's: the first 90 % of the characters train, the last 10 %
  validate (``valid_fraction=0.1, test_fraction=0``), the split the issue's targets are
  measured on; char-rnn's 90/5/5 is ``valid_fraction=0.05, test_fraction=0.05`` (train
  = first 90 %, valid = next 5 %, test = last 5 %).
* **any text file** (``read_text_corpus``): split the same way by fractions (characters
  for char level, lines for word level).

Files are read by the validated readers of ``seqlab.data.readers`` (a missing, empty or
non-UTF-8 file is a ``DataError`` naming file, line and fix); the shared copies are also
checked against the sha256 of the README (a mismatch is logged, not fatal).

Batching (``batchify`` + ``StreamBatcher``): the token stream of a split is cut into R
equal rows, row r holding tokens r·n … (r+1)·n − 1, so that batch i is the i-th chunk
of bptt columns of every row and row r of batch i+1 continues row r of batch i. The
model's final state for a chunk, detached, is the initial state of the next (truncated
BPTT, Zaremba et al. 2014); the state restarts at the first chunk of every epoch.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from torch import Tensor

from seqlab.data.batching import Dropped
from seqlab.data.readers import read_char_stream
from seqlab.data.vocab import EOS
from seqlab.errors import DataError

log = logging.getLogger("seqlab.data")

Level = Literal["word", "char"]
SPLITS = ("train", "valid", "test")
README = "shared/data/README.md"

# sha256 of the decompressed content, from shared/data/README.md.
PTB_SHA256 = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


@dataclass
class LMCorpus:
    """The splits of a corpus as text: word level, token lists (⟨/s⟩ ending each line);
    char level, strings. ``source`` says where they came from (for logs)."""

    level: Level
    splits: dict[str, list[str] | str]
    source: str

    def sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.splits.items()}


# --------------------------------------------------------------------------- reading


def _check_sha256(path: Path, text: str, expected: str) -> None:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != expected:
        log.warning(
            "%s: sha256 %s differs from the %s value %s (a modified copy?)",
            path,
            digest[:12],
            README,
            expected[:12],
        )


def _need_dir(data_dir: Path | None, sub: str, what: str) -> Path:
    if data_dir is None:
        raise DataError(
            f"no data folder for {what}",
            hint="pass --data-dir (the folder holding ptb/ and tinyshakespeare/, e.g. "
            "../shared/data) or use task.data=text with task.path=FILE",
        )
    folder = Path(data_dir) / sub
    if not folder.is_dir():
        raise DataError(
            f"{what} folder not found",
            path=folder,
            hint=f"point --data-dir at the folder that holds {sub}/ (see {README})",
        )
    return folder


def word_stream(text: str) -> list[str]:
    """Each non-empty line's whitespace-separated words, then ⟨/s⟩ (PTB convention)."""
    stream: list[str] = []
    for line in text.split("\n"):
        words = line.split()
        if words:
            stream.extend(words)
            stream.append(EOS)
    return stream


def read_ptb(data_dir: Path | None, level: Level = "word") -> LMCorpus:
    """Penn Treebank (Mikolov's LM version) from ``data_dir/ptb``; ``.gz`` or plain."""
    folder = _need_dir(data_dir, "ptb", "Penn Treebank")
    splits: dict[str, list[str] | str] = {}
    for split in SPLITS:
        name = f"ptb.{split}.txt"
        path = folder / f"{name}.gz"
        if not path.is_file() and (folder / name).is_file():
            path = folder / name
        text = read_char_stream(path)
        _check_sha256(path, text, PTB_SHA256[split])
        splits[split] = word_stream(text) if level == "word" else text
    return LMCorpus(level, splits, str(folder))


def fraction_bounds(n: int, valid_fraction: float, test_fraction: float) -> tuple[int, int]:
    """(a, b): train = [0, a), valid = [a, b), test = [b, n), with a = ⌊n(1 − v − t)⌋ and
    b = ⌊n(1 − t)⌋ (nanoGPT's ``int(n * 0.9)`` for v = 0.1, t = 0)."""
    if not 0.0 < valid_fraction < 1.0 or not 0.0 <= test_fraction < 1.0:
        raise ValueError(
            f"need 0 < valid_fraction < 1 and 0 <= test_fraction < 1, "
            f"got {valid_fraction}, {test_fraction}"
        )
    if valid_fraction + test_fraction >= 1.0:
        raise ValueError("valid_fraction + test_fraction must leave some training data")
    # Rounded to 12 digits first, so 1 − 0.05 − 0.05 is 0.9 and not 0.8999…
    train, train_valid = (
        round(1.0 - valid_fraction - test_fraction, 12),
        round(1.0 - test_fraction, 12),
    )
    return int(n * train), int(n * train_valid)


def split_text(
    text: str, level: Level, valid_fraction: float, test_fraction: float, path: Path | str
) -> dict[str, list[str] | str]:
    """Split one text by fractions: characters (char level) or lines (word level)."""
    if level == "char":
        a, b = fraction_bounds(len(text), valid_fraction, test_fraction)
        parts: list[Any] = [text[:a], text[a:b], text[b:]]
    else:
        lines = [line for line in text.split("\n") if line.strip()]
        a, b = fraction_bounds(len(lines), valid_fraction, test_fraction)
        parts = [word_stream("\n".join(chunk)) for chunk in (lines[:a], lines[a:b], lines[b:])]
    names = SPLITS if test_fraction > 0 else SPLITS[:2]
    out = dict(zip(names, parts))
    for name, part in out.items():
        if len(part) < 2:
            raise DataError(
                f"the {name} split has {len(part)} {level} tokens",
                path=path,
                hint="use a longer file or change task.valid_fraction / task.test_fraction",
            )
    return out


def read_tiny_shakespeare(
    data_dir: Path | None,
    level: Level = "char",
    valid_fraction: float = 0.1,
    test_fraction: float = 0.0,
) -> LMCorpus:
    """Tiny Shakespeare split by fractions (default: nanoGPT's 90/10, see module doc)."""
    path = _need_dir(data_dir, "tinyshakespeare", "Tiny Shakespeare") / "input.txt"
    text = read_char_stream(path)
    _check_sha256(path, text, SHAKESPEARE_SHA256)
    return LMCorpus(level, split_text(text, level, valid_fraction, test_fraction, path), str(path))


def read_text_corpus(
    path: str | Path, level: Level, valid_fraction: float = 0.1, test_fraction: float = 0.0
) -> LMCorpus:
    """Any UTF-8 text file (plain or ``.gz``) split by fractions."""
    text = read_char_stream(path)
    return LMCorpus(level, split_text(text, level, valid_fraction, test_fraction, path), str(path))


# --------------------------------------------------------------------------- batching


def batchify(ids: Tensor, rows: int) -> Tensor:
    """Cut a stream into ``rows`` contiguous rows of n = ⌊N / rows⌋ tokens (the tail of
    N mod rows tokens is dropped): out[r, j] = ids[r·n + j].

    Shapes: ids (N,) long -> (rows, n)
    """
    n = ids.numel() // rows
    if n < 2:
        raise ValueError(f"{ids.numel()} tokens are too few for {rows} rows of at least 2")
    return ids[: rows * n].view(rows, n)  # (R, n)


def n_chunks(n: int, bptt: int) -> int:
    """Chunks of at most ``bptt`` inputs over a row of n tokens (n − 1 predictions)."""
    return -(-(n - 1) // bptt)


def chunk(grid: Tensor, i: int, bptt: int) -> tuple[Tensor, Tensor]:
    """Inputs and next-token targets of chunk i: x = grid[:, s : s+T], y = grid[:, s+1 : s+T+1]
    with s = i·bptt, T = min(bptt, n − 1 − s).  Shapes: grid (R, n) -> x, y (R, T)."""
    s = i * bptt
    T = min(bptt, grid.size(1) - 1 - s)
    return grid[:, s : s + T], grid[:, s + 1 : s + 1 + T]  # (R, T), (R, T)


STATE_VERSION = 1


class StreamBatcher:
    """Batch order of truncated BPTT over a contiguous stream, with the interface of
    :class:`seqlab.data.batching.TokenBudgetBatcher` (``epoch``, ``position``, ``len``,
    iteration, ``state_dict`` / ``load_state_dict``) so the Trainer drives it unchanged.

    Each epoch yields ``[i, offset]`` for the chunks i = 0 … len − 1 in order (never
    shuffled: consecutive chunks continue each other). ``offset`` is where the epoch's
    stream starts: 0, or with ``random_offset`` a number in [0, bptt) drawn from (seed,
    epoch), so that chunk boundaries move from epoch to epoch (a model that carries no
    state, the Transformer LM, then sees other windows each epoch; AWD-LSTM varies the
    BPTT length for the same reason). DDP: the stream has ``batch_size · world_size`` rows
    and rank r reads rows r·B … (r+1)·B − 1 of every chunk.

    Args:
        n_tokens: N, tokens of the training stream.
        batch_size: B, rows per rank.
        bptt: inputs per chunk (the truncation length).
    """

    def __init__(
        self,
        n_tokens: int,
        batch_size: int,
        bptt: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        random_offset: bool = False,
    ) -> None:
        if batch_size < 1 or bptt < 1:
            raise ValueError(f"batch_size and bptt must be >= 1, got {batch_size}, {bptt}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.rows = batch_size * world_size
        if (n_tokens - (bptt if random_offset else 0)) // self.rows < 2:
            raise ValueError(
                f"{n_tokens} training tokens are too few for {self.rows} rows "
                "(lower task.batch_size)"
            )
        self.n_tokens, self.batch_size, self.bptt = n_tokens, batch_size, bptt
        self.rank, self.world_size = rank, world_size
        self.seed, self.random_offset = int(seed), random_offset
        self.epoch, self.position = 0, 0
        self.dropped = Dropped(0, np.zeros(0, dtype=np.int64))

    def offset(self, epoch: int | None = None) -> int:
        """Where epoch ``epoch``'s stream starts (a pure function of seed and epoch)."""
        if not self.random_offset:
            return 0
        e = self.epoch if epoch is None else epoch
        return int(np.random.default_rng([self.seed, e, 0x57EA]).integers(0, self.bptt))

    def row_length(self, epoch: int | None = None) -> int:
        """n, tokens per row in this epoch."""
        return (self.n_tokens - self.offset(epoch)) // self.rows

    @property
    def num_examples(self) -> int:
        """Training tokens predicted per epoch over all ranks (R rows of n − 1)."""
        return self.rows * (self.row_length() - 1)

    @property
    def tokens_per_batch(self) -> int:
        return self.batch_size * self.bptt

    def row_slice(self) -> slice:
        return slice(self.rank * self.batch_size, (self.rank + 1) * self.batch_size)

    def describe(self) -> str:
        moving = ", start moved each epoch" if self.random_offset else ""
        return (
            f"{self.num_examples:,} training tokens per epoch in {self.rows} contiguous "
            f"rows, {len(self)} chunks of bptt {self.bptt} (truncated BPTT{moving})"
        )

    def __len__(self) -> int:
        return n_chunks(self.row_length(), self.bptt)

    def __iter__(self) -> Iterator[list[int]]:
        offset = self.offset()
        while self.position < len(self):
            self.position += 1
            yield [self.position - 1, offset]
        self.epoch, self.position = self.epoch + 1, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = int(epoch), 0

    def _settings(self) -> dict[str, Any]:
        return {
            "kind": "stream",
            "n_tokens": self.n_tokens,
            "batch_size": self.batch_size,
            "bptt": self.bptt,
            "world_size": self.world_size,
            "seed": self.seed,
            "random_offset": self.random_offset,
        }

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        pos = self.position if position is None else int(position)
        return {"version": STATE_VERSION, "epoch": self.epoch, "position": pos, **self._settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION or state.get("kind") != "stream":
            raise ValueError("the checkpoint's batcher is not a stream batcher of this version")
        for key, mine in self._settings().items():
            if state.get(key) != mine:
                raise ValueError(
                    f"{key}={state.get(key)!r} in the checkpoint, {mine!r} here; resume with "
                    "the same data and settings"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= n_chunks(self.row_length(epoch), self.bptt):
            raise ValueError(f"invalid stream position: epoch={epoch}, position={position}")
        self.epoch, self.position = epoch, position
