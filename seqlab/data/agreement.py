"""Long-distance subject–verb agreement, the notes' "The cat, which already ate ..., was
full." (notes 000, the LSTM slide; notes 002, vanishing gradients): the number of the
subject at the start decides the verb at the end, with n distractor words between.

    x = [subject, w_1, …, w_n, VERB?]        subject ∈ {cat (singular), cats (plural)}
    y = 0 ("was") if subject = cat, 1 ("were") if subject = cats

The label depends on x_0 only, so a many-to-one RNN reading x must carry one bit across
n + 1 steps: the dependency distance is T − 1 = n + 1 (T = n + 2 tokens).

Distractors are either uniform random ids (``distractors="random"``, no data needed) or
contiguous windows of Penn Treebank words (``"ptb"``, real English between the subject
and the verb, as in Linzen et al. 2016's agreement task built from text; needs
``data_dir/ptb``). Either way the distractors carry no information about y.

Ids: 0 pad (unused), 1 cat, 2 cats, 3 the verb slot, 4 … V−1 distractor words.

Shapes: ``sample`` returns x (B, T) long, y (B,) long.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from seqlab.errors import DataError

PAD, SINGULAR, PLURAL, VERB = 0, 1, 2, 3
FIRST_WORD = 4
SPECIALS = ("<pad>", "cat", "cats", "<was|were?>")
Distractors = Literal["random", "ptb"]


@dataclass
class AgreementTask:
    """Generator of agreement examples; ``words`` are the distractor vocabulary (ids
    FIRST_WORD …), ``stream`` the PTB word ids windows are cut from (empty for random)."""

    words: list[str]
    stream: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # (N,)

    @property
    def vocab_size(self) -> int:
        return FIRST_WORD + len(self.words)

    @property
    def source(self) -> str:
        return "ptb" if self.stream.numel() else "random"

    def sample(
        self, batch_size: int, n_distractors: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """B examples with exactly ``n_distractors`` words between subject and verb."""
        if batch_size < 1 or n_distractors < 0:
            raise ValueError(
                f"need batch_size >= 1 and n_distractors >= 0, got {batch_size}, {n_distractors}"
            )
        B, n = batch_size, n_distractors
        y = torch.randint(0, 2, (B,), generator=generator)  # (B,)
        if self.stream.numel():
            if n > self.stream.numel():
                raise ValueError(f"PTB stream has {self.stream.numel()} words, need {n}")
            start = torch.randint(0, self.stream.numel() - n + 1, (B, 1), generator=generator)
            middle = self.stream[start + torch.arange(n)]  # (B, n)
        else:
            middle = torch.randint(FIRST_WORD, self.vocab_size, (B, n), generator=generator)
        subject = (SINGULAR + y)[:, None]  # (B, 1)
        verb = torch.full((B, 1), VERB, dtype=torch.long)  # (B, 1)
        return torch.cat([subject, middle, verb], dim=1), y  # (B, n + 2), (B,)

    def decode(self, x: Tensor) -> list[str]:
        """Token ids (T,) → words, for printing an example."""
        names = list(SPECIALS) + self.words
        return [names[int(i)] for i in x]


def random_task(n_words: int = 100) -> AgreementTask:
    """Distractors drawn uniformly from ``n_words`` placeholder words w0 … w{n−1}."""
    if n_words < 1:
        raise ValueError(f"n_words must be >= 1, got {n_words}")
    return AgreementTask([f"w{i}" for i in range(n_words)])


def ptb_task(data_dir: str | Path | None, n_words: int = 2000) -> AgreementTask:
    """Distractors = windows of PTB training text (the ``n_words`` most frequent words;
    rarer ones and ⟨/s⟩ become ⟨unk⟩). Words "cat"/"cats" are mapped to ⟨unk⟩ too, so the
    middle never holds a second subject."""
    from seqlab.data.lm_corpus import read_ptb

    if data_dir is None:
        raise DataError(
            "no data folder for the PTB distractors",
            hint="pass --data-dir (the folder holding ptb/) or use --distractors random",
        )
    words = read_ptb(Path(data_dir)).splits["train"]
    assert isinstance(words, list)
    counts = Counter(w for w in words if w not in ("cat", "cats", "</s>", "<unk>"))
    vocab = ["<unk>"] + [w for w, _ in counts.most_common(n_words - 1)]
    index = {w: FIRST_WORD + i for i, w in enumerate(vocab)}
    stream = torch.tensor([index.get(w, FIRST_WORD) for w in words], dtype=torch.long)  # (N,)
    return AgreementTask(vocab, stream)


def make_task(
    distractors: Distractors = "random", data_dir: str | Path | None = None, n_words: int = 100
) -> AgreementTask:
    """``random`` (no data) or ``ptb`` (needs ``data_dir/ptb``)."""
    if distractors == "random":
        return random_task(n_words)
    if distractors == "ptb":
        return ptb_task(data_dir, max(n_words, 2))
    raise ValueError(f"distractors must be 'random' or 'ptb', got {distractors!r}")
