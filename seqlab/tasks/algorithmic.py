"""Synthetic sequence-to-sequence tasks: copy, reverse, sort.

The classic sanity checks of an encoder–decoder (Sutskever et al. 2014 reversed the
source to shorten dependencies; pointer networks sort). Data are generated from
``data_seed``, so every run, rank and resume sees the same examples without any files.
Decoding uses the one greedy search of ``seqlab.decode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.greedy import greedy
from seqlab.errors import SeqlabError
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task, seq2seq_token_loss

N_SPECIAL = 4  # <pad> <unk> <s> </s>


@dataclass(frozen=True)
class AlgorithmicConfig:
    kind: Literal["copy", "reverse", "sort"] = "reverse"
    n_symbols: int = 10
    min_len: int = 3
    max_len: int = 10
    n_train: int = 20000
    n_valid: int = 500
    data_seed: int = 1234

    def __post_init__(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.n_symbols < 2:
            raise ValueError(f"n_symbols must be >= 2, got {self.n_symbols}")


def make_examples(cfg: AlgorithmicConfig, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """n (source, target) id-list pairs; symbols are ids N_SPECIAL … N_SPECIAL+n_symbols−1."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=n)
    pairs = []
    for length in lengths:
        src = rng.integers(N_SPECIAL, N_SPECIAL + cfg.n_symbols, size=int(length))
        if cfg.kind == "copy":
            tgt = src
        elif cfg.kind == "reverse":
            tgt = src[::-1]
        else:
            tgt = np.sort(src)
        pairs.append((src.tolist(), tgt.tolist()))
    return pairs


@TASKS.register("algorithmic", AlgorithmicConfig)
class AlgorithmicTask(Task):
    """Copy, reverse or sort random symbol sequences (a seq2seq sanity task)."""

    pad_id = PAD_ID
    # Methods ``seqlab.load(...)`` exposes with the model bound: loaded.predict([[3, 1, 2]]).
    inference_methods = ("predict",)

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        cfg = self.cfg
        self.splits = {
            "train": make_examples(cfg, cfg.n_train, cfg.data_seed),
            "valid": make_examples(cfg, cfg.n_valid, cfg.data_seed + 1),
        }

    def model_kwargs(self) -> dict[str, Any]:
        V = N_SPECIAL + self.cfg.n_symbols
        return {"src_vocab": V, "tgt_vocab": V, "pad_id": PAD_ID}

    def train_lengths(self) -> np.ndarray:
        return np.array([len(s) + 1 for s, _ in self.splits["train"]])  # target has </s>

    def collate(self, indices: list[int], split: str = "train") -> Seq2SeqBatch:
        data = self.splits[split]
        return collate_seq2seq([data[i] for i in indices], bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)

    def loss(self, model: nn.Module, batch: Seq2SeqBatch, label_smoothing: float = 0.0):
        return seq2seq_token_loss(model, batch, PAD_ID, label_smoothing)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """Teacher-forced loss/perplexity and greedy-decoded exact match and token accuracy."""
        was_training = model.training
        model.eval()
        data = self.splits[split]
        nll, n_tok, exact, tok_ok = 0.0, 0, 0, 0
        device = next(model.parameters()).device
        for start in range(0, len(data), 256):
            batch = self.collate(list(range(start, min(start + 256, len(data)))), split)
            batch = batch.to(device)
            out: LossOutput = self.loss(model, batch)
            nll += float(out.nll_sum)
            n_tok += out.n_tokens
            memory = model.encode(batch.src, batch.src_mask)  # (B, S, D)
            state = model.init_state(memory, batch.src_mask)
            T = batch.y_out.size(1)
            result = greedy(model, state, batch.batch_size, BOS_ID, EOS_ID, max_len=T)
            hyp = torch.full_like(batch.y_out, PAD_ID)  # (B, T)
            width = min(T, result.tokens.size(1))
            hyp[:, :width] = result.tokens[:, :width]
            ok = (hyp == batch.y_out) | ~batch.tgt_mask  # (B, T)
            exact += int(ok.all(1).sum())
            tok_ok += int(((hyp == batch.y_out) & batch.tgt_mask).sum())
        model.train(was_training)
        return {
            "loss": nll / n_tok,
            "ppl": float(np.exp(nll / n_tok)),
            "exact_match": exact / len(data),
            "token_acc": tok_ok / n_tok,
        }

    @torch.no_grad()
    def predict(self, model: nn.Module, sequences: list[list[int]]) -> list[list[int]]:
        """Greedy outputs for symbol sequences; symbols are 0 … n_symbols − 1.

        ``predict(model, [[3, 1, 2]])`` → ``[[2, 1, 3]]`` for a trained reverse model. The
        output stops before ⟨/s⟩; a special token other than ⟨/s⟩ (which a trained model
        does not emit) comes back as −1.
        """
        n = self.cfg.n_symbols
        for i, seq in enumerate(sequences):
            if not seq or any(not 0 <= int(s) < n for s in seq):
                raise SeqlabError(
                    f"predict: sequence {i} must be a non-empty list of symbols in "
                    f"[0, {n}), got {list(seq)!r}"
                )
        if not sequences:
            return []
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        pairs = [([int(s) + N_SPECIAL for s in seq], [BOS_ID]) for seq in sequences]
        batch = collate_seq2seq(pairs, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID).to(device)
        memory = model.encode(batch.src, batch.src_mask)  # (B, S, D)
        state = model.init_state(memory, batch.src_mask)
        max_len = 2 * batch.src.size(1) + 2  # room past the expected length, then stop
        result = greedy(model, state, batch.batch_size, BOS_ID, EOS_ID, max_len=max_len)
        model.train(was_training)
        out = []
        for row, length in zip(result.tokens.tolist(), result.lengths.tolist()):
            ids = row[:length]
            if ids and ids[-1] == EOS_ID:
                ids = ids[:-1]
            out.append([i - N_SPECIAL if i >= N_SPECIAL else -1 for i in ids])
        return out
