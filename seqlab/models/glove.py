"""GloVe: global vectors from weighted least squares on co-occurrence counts
(Pennington, Socher, Manning 2014).

Co-occurrence counts (§4.2): in a symmetric window of ``window`` words on each side, a
pair of tokens d apart adds 1/d to X_ij and to X_ji ("word pairs that are d words apart
contribute 1/d to the total count"); windows stay inside a sentence.

Model and cost (eq. 8) over the non-zero X_ij:

    J = Σ_{i,j: X_ij > 0} f(X_ij) (w_iᵀ w̃_j + b_i + b̃_j − log X_ij)²
    f(x) = (x / x_max)^α if x < x_max else 1           (eq. 9; x_max = 100, α = 3/4)

Optimised with AdaGrad (§4.2, initial rate 0.05) on minibatches of non-zero entries,
sampled without replacement each epoch; the word vectors are w + w̃ (§4.2, "we choose to
use the sum W + W̃ as our word vectors").

Deviations: AdaGrad steps on minibatches of ``batch_size`` entries (gradients of a row
summed within a batch) with ``torch.optim.Adagrad``, instead of glove.c's one-entry-at-a-time
Hogwild updates. Two forms of AdaGrad (``adagrad=``):

- ``"paper"``: textbook AdaGrad with rate η = 0.05, accumulator from 0, step
  η·g / √(Σg²). Its first step on every coordinate is ±η whatever the size of g, so rows
  seen only in low-weight entries (small f(X_ij)) move as far as frequent ones.
- ``"glove.c"``: the reference code's form. glove.c accumulates (η·g)² from 1, i.e. its step
  is η·g / √(1 + Σ(η·g)²) = g / √(1/η² + Σg²): AdaGrad with rate 1 and initial accumulator
  1/η². It starts as plain SGD with rate η (small g, small step) and becomes AdaGrad once
  Σ(η·g)² outgrows 1. (torch's AdaGrad adds g_t² before dividing and glove.c after, so the
  sum here runs to t, glove.c's to t − 1: a difference only while Σ(η·g)² ≲ 1.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.data.embedding_corpus import EmbeddingCorpus
from seqlab.data.word_vectors_io import TrainedVectors, WordVectors
from seqlab.models.word2vec import keep_probability
from seqlab.models.word2vec import subsample as subsample_tokens

__all__ = [
    "GloVe",
    "cooccurrence",
    "glove_adagrad",
    "glove_loss",
    "glove_weight",
    "train_glove",
]


def cooccurrence(
    ids: Tensor,
    sentence: Tensor,
    V: int,
    window: int = 10,
    weighting: Literal["harmonic", "uniform"] = "harmonic",
) -> Tensor:
    """Symmetric co-occurrence matrix X: tokens d ≤ ``window`` apart in one sentence add
    1/d (``harmonic``, GloVe) or 1 (``uniform``) to X_ij and X_ji.

    Built as A (left word i, right word j; one tensor op per offset d, duplicates merged
    on the key i·V + j), then X = A + Aᵀ.

    Shapes:
        ids, sentence: (N,) long   returns: sparse COO (V, V) float64, coalesced
    """
    keys = torch.empty(0, dtype=torch.long)  # (nnz,) i·V + j
    values = torch.empty(0, dtype=torch.float64)  # (nnz,)
    for d in range(1, min(window, ids.numel() - 1) + 1):
        same = sentence[:-d] == sentence[d:]  # (N-d,)
        key = ids[:-d][same] * V + ids[d:][same]  # (P,) left word i, right word j
        weight = 1.0 / d if weighting == "harmonic" else 1.0
        keys = torch.cat([keys, key])  # (nnz + P,)
        values = torch.cat([values, torch.full((key.numel(),), weight, dtype=torch.float64)])
        keys, where = torch.unique(keys, return_inverse=True)  # (nnz',) (nnz + P,)
        values = torch.zeros(keys.numel(), dtype=torch.float64).index_add_(0, where, values)
    index = torch.stack([keys // V, keys % V])  # (2, nnz)
    A = torch.sparse_coo_tensor(index, values, (V, V), check_invariants=True)  # (V, V)
    return (A + A.t()).coalesce()  # (V, V)


def glove_weight(X: Tensor, x_max: float = 100.0, alpha: float = 0.75) -> Tensor:
    """f(x) = (x / x_max)^α for x < x_max, else 1 (Pennington eq. 9).

    Shapes:
        X: any   returns: same
    """
    return (X / x_max).pow(alpha).clamp(max=1.0)


def glove_loss(
    w_i: Tensor,
    w_tilde_j: Tensor,
    b_i: Tensor,
    b_tilde_j: Tensor,
    X_ij: Tensor,
    x_max: float = 100.0,
    alpha: float = 0.75,
) -> Tensor:
    """f(X_ij) (w_iᵀ w̃_j + b_i + b̃_j − log X_ij)² per entry (the terms of eq. 8).

    Shapes:
        w_i, w_tilde_j: (B, D)   b_i, b_tilde_j, X_ij: (B,)   returns: (B,)
    """
    diff = (w_i * w_tilde_j).sum(-1) + b_i + b_tilde_j - torch.log(X_ij)  # (B,)
    return glove_weight(X_ij, x_max, alpha) * diff.pow(2)  # (B,)


class GloVe(nn.Module):
    """Word vectors ``W``, context vectors ``W_tilde`` (V, D) and biases ``b``, ``b_tilde``
    (V,), initialised U(−0.5/D, 0.5/D) as glove.c; all give sparse gradients.

    Shapes:
        i, j: (B,) long   X_ij: (B,)   returns: (B,) loss terms
    """

    def __init__(self, V: int, D: int, x_max: float = 100.0, alpha: float = 0.75) -> None:
        super().__init__()
        self.V, self.D, self.x_max, self.alpha = V, D, x_max, alpha
        self.W = nn.Embedding(V, D, sparse=True)
        self.W_tilde = nn.Embedding(V, D, sparse=True)
        self.b = nn.Embedding(V, 1, sparse=True)
        self.b_tilde = nn.Embedding(V, 1, sparse=True)
        with torch.no_grad():
            for table in (self.W, self.W_tilde, self.b, self.b_tilde):
                table.weight.uniform_(-0.5 / D, 0.5 / D)

    def forward(self, i: Tensor, j: Tensor, X_ij: Tensor) -> Tensor:
        return glove_loss(
            self.W(i),  # (B, D)
            self.W_tilde(j),  # (B, D)
            self.b(i).squeeze(-1),  # (B,)
            self.b_tilde(j).squeeze(-1),  # (B,)
            X_ij,
            self.x_max,
            self.alpha,
        )

    def word_vectors(self) -> Tensor:
        """W + W̃ (Pennington §4.2).

        Shapes:
            returns: (V, D)
        """
        return (self.W.weight + self.W_tilde.weight).detach().clone()  # (V, D)


def glove_adagrad(
    params: Iterable[Tensor], lr: float, form: Literal["paper", "glove.c"]
) -> torch.optim.Adagrad:
    """AdaGrad with rate η in the paper's form (accumulator from 0) or glove.c's (rate 1,
    accumulator from 1/η²): see the module doc."""
    if form == "paper":
        return torch.optim.Adagrad(params, lr=lr)
    if form == "glove.c":
        return torch.optim.Adagrad(params, lr=1.0, initial_accumulator_value=1.0 / lr**2)
    raise ValueError(f"adagrad must be 'paper' or 'glove.c', got {form!r}")


def train_glove(
    corpus: EmbeddingCorpus,
    dim: int = 100,
    window: int = 10,
    epochs: int = 50,
    minutes: float | None = None,
    batch_size: int = 1024,
    lr: float = 0.05,
    x_max: float = 100.0,
    alpha: float = 0.75,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    adagrad: Literal["paper", "glove.c"] = "paper",
    subsample: float | None = None,
) -> TrainedVectors:
    """Count X (1/d weighting), then AdaGrad (``adagrad``: see the module doc) on J for
    ``epochs`` or ``minutes``.

    ``subsample`` = t: before counting, drop each occurrence of w with probability
    1 − min(1, √(t / f(w))) (word2vec's subsampling, ``keep_probability``), once, with
    ``seed``; the kept tokens close up, so windows reach further past frequent words
    (Levy et al. 2015's "dirty" subsampling for count methods and GloVe). None: off.

    Each step minimises the sum of the batch's loss terms (J restricted to the batch).
    """
    start = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ids, sentence = corpus.ids, corpus.sentence  # (N,) (N,)
    if subsample is not None:
        counts = torch.bincount(ids, minlength=corpus.V)  # (V,)
        ids, sentence = subsample_tokens(ids, sentence, keep_probability(counts, subsample), g)
    X = cooccurrence(ids, sentence, corpus.V, window, "harmonic")  # (V, V)
    i_all, j_all = X.indices()  # (nnz,) (nnz,)
    X_all = X.values().float()  # (nnz,)
    model = GloVe(corpus.V, dim, x_max, alpha)
    opt = glove_adagrad(model.parameters(), lr, adagrad)
    deadline = math.inf if minutes is None else start + 60.0 * minutes
    losses: list[float] = []
    done = 0.0
    nnz = X_all.numel()
    n_batches = max(1, math.ceil(nnz / batch_size))
    for epoch in range(epochs):
        order = torch.randperm(nnz, generator=g)  # (nnz,)
        total, steps = 0.0, 0
        for s in range(0, nnz, batch_size):
            batch = order[s : s + batch_size]  # (B,)
            loss = model(i_all[batch], j_all[batch], X_all[batch]).sum()
            opt.zero_grad()
            loss.backward()
            # Adagrad builds sparse tensors from our own valid indices: skip the checks (saying
            # so explicitly also silences torch's "implicitly disabled" warning)
            with torch.sparse.check_sparse_tensor_invariants(enable=False):
                opt.step()
            total += float(loss.detach())
            steps += 1
            if time.perf_counter() > deadline:
                break
        losses.append(total / max(1, min(nnz, steps * batch_size)))
        done = epoch + steps / n_batches
        if log is not None:
            log(f"glove epoch {done:.2f}: {nnz:,} non-zeros, loss/entry {losses[-1]:.4f}")
        if time.perf_counter() > deadline:
            break
    vectors = WordVectors(list(corpus.words), model.word_vectors())
    return TrainedVectors(vectors, done, time.perf_counter() - start, losses)
