"""Skip-gram with negative sampling (SGNS; Mikolov, Sutskever, Chen, Corrado, Dean 2013,
"Distributed Representations of Words and Phrases and their Compositionality").

Each word has an input ("centre") vector v_w and an output ("context") vector u_w (the
notes' e_c and θ_t: P(y = 1 | c, t) = σ(θ_tᵀ e_c)). For a centre word c, an observed
context word o and k noise words w_1…w_k drawn from P_n (Mikolov eq. 4):

    L(c, o) = −log σ(u_oᵀ v_c) − Σ_{i=1..k} log σ(−u_{w_i}ᵀ v_c)
    P_n(w) = U(w)^{3/4} / Σ_w' U(w')^{3/4}              (unigram counts U to the 3/4)

Subsampling of frequent words (Mikolov §2.3, eq. 5, **the paper's variant**): every
occurrence of w is discarded with probability P(w) = 1 − √(t / f(w)), f(w) = U(w)/N, i.e.
kept with probability min(1, √(t / f(w))). (The released C code uses a different formula,
keep = (√(f/t) + 1)·t/f; seqlab follows the paper.) Discarded tokens are removed before
windows are taken, so windows widen over them, as in the paper and the code.

Dynamic window (the C code; Mikolov et al. 2013a §3.2 "Continuous Skip-gram"): for each
centre token a radius b is drawn uniformly from {1, …, window}; contexts are the tokens at
distance ≤ b in the same sentence, so near words are sampled more often.

Training is fully batched: an epoch's (centre, context) pairs are built with tensor ops
(one op per offset, never a Python loop over pairs), shuffled, and fed in minibatches.

Deviations: minibatches of ``batch_size`` pairs optimised with ``torch.optim.SparseAdam``
(lazy Adam: only rows in the batch are updated, O(B·(k+2)·D) per step instead of
O(V·D)), instead of the paper's Hogwild single-pair SGD with a linearly decaying rate —
with summed minibatch gradients, SGD's step on a frequent word grows with the batch and
needs a batch-size dependent rate, while Adam's per-coordinate scaling is insensitive to
it and to the Zipfian frequency spread; noise words equal to the positive word are kept
(the C code skips them). The vectors returned are the input vectors v.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.data.embedding_corpus import EmbeddingCorpus
from seqlab.data.word_vectors_io import TrainedVectors, WordVectors

__all__ = [
    "SkipGramNS",
    "keep_probability",
    "noise_distribution",
    "sample_noise",
    "sgns_grad",
    "sgns_loss",
    "skipgram_pairs",
    "subsample",
    "train_sgns",
]


def noise_distribution(counts: Tensor, power: float = 0.75) -> Tensor:
    """P_n(w) = U(w)^power / Σ U^power (Mikolov 2013: power 3/4).

    Shapes:
        counts: (V,)   returns: (V,) float64, sums to 1
    """
    weights = counts.double().pow(power)  # (V,)
    return weights / weights.sum()  # (V,)


def sample_noise(P_n: Tensor, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Draw word ids from P_n by inverting its CDF (``searchsorted``; O(log V) per draw).

    Shapes:
        P_n: (V,)   returns: shape, long
    """
    cdf = torch.cumsum(P_n, 0)  # (V,)
    r = torch.rand(shape, generator=generator, dtype=cdf.dtype) * cdf[-1]  # shape
    return torch.searchsorted(cdf, r, right=True).clamp_(max=P_n.numel() - 1)  # shape


def keep_probability(counts: Tensor, t: float = 1e-4) -> Tensor:
    """Probability of keeping an occurrence of w: 1 − P(w) = min(1, √(t / f(w))),
    f(w) = U(w) / Σ U (Mikolov 2013 eq. 5; the paper's variant, not the C code's).

    Shapes:
        counts: (V,)   returns: (V,) float64
    """
    f = counts.double() / counts.sum()  # (V,)
    return torch.sqrt(t / f).clamp(max=1.0)  # (V,)


def subsample(
    ids: Tensor, sentence: Tensor, p_keep: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Drop each token n with probability 1 − p_keep[ids[n]].

    Shapes:
        ids, sentence: (N,)   p_keep: (V,)   returns: two (N',) tensors
    """
    keep = torch.rand(ids.shape, generator=generator, dtype=p_keep.dtype) < p_keep[ids]  # (N,)
    return ids[keep], sentence[keep]  # (N',) (N',)


def skipgram_pairs(
    ids: Tensor, sentence: Tensor, window: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """All (centre, context) pairs of a token stream with a dynamic window.

    Centre token n gets a radius b_n ~ U{1..window} (``generator=None``: b_n = window, the
    full window); token m is a context of n when 0 < |m − n| ≤ b_n and both are in the
    same sentence. One tensor op per offset d = 1..window.

    Shapes:
        ids, sentence: (N,) long   returns: centres (P,), contexts (P,) long
    """
    N = ids.numel()
    if generator is None:
        b = torch.full((N,), window, dtype=torch.long)  # (N,)
    else:
        b = torch.randint(1, window + 1, (N,), generator=generator)  # (N,)
    centres, contexts = [], []
    for d in range(1, min(window, N - 1) + 1):
        same = sentence[:-d] == sentence[d:]  # (N-d,) tokens n and n+d share a sentence
        right = same & (b[:-d] >= d)  # (N-d,) centre n, context n+d
        left = same & (b[d:] >= d)  # (N-d,) centre n+d, context n
        centres += [ids[:-d][right], ids[d:][left]]
        contexts += [ids[d:][right], ids[:-d][left]]
    if not centres:
        empty = torch.empty(0, dtype=torch.long)  # (0,)
        return empty, empty
    return torch.cat(centres), torch.cat(contexts)  # (P,) (P,)


def sgns_loss(v_c: Tensor, u_o: Tensor, u_neg: Tensor) -> Tensor:
    """L = −log σ(u_oᵀ v_c) − Σ_k log σ(−u_kᵀ v_c)   (Mikolov 2013 eq. 4, negated).

    Shapes:
        v_c: (B, D)   u_o: (B, D)   u_neg: (B, K, D)   returns: (B,)
    """
    pos = (u_o * v_c).sum(-1)  # (B,) u_oᵀ v_c
    neg = torch.einsum("bkd,bd->bk", u_neg, v_c)  # (B, K) u_kᵀ v_c
    return -F.logsigmoid(pos) - F.logsigmoid(-neg).sum(-1)  # (B,)


def sgns_grad(v_c: Tensor, u_o: Tensor, u_neg: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form gradients of :func:`sgns_loss` (summed over the batch), using
    d/dx[−log σ(x)] = σ(x) − 1 and d/dx[−log σ(−x)] = σ(x):

        ∂L/∂v_c = (σ(u_oᵀv_c) − 1) u_o + Σ_k σ(u_kᵀv_c) u_k
        ∂L/∂u_o = (σ(u_oᵀv_c) − 1) v_c        ∂L/∂u_k = σ(u_kᵀv_c) v_c

    Shapes:
        v_c, u_o: (B, D)   u_neg: (B, K, D)   returns: (B, D), (B, D), (B, K, D)
    """
    g_pos = torch.sigmoid((u_o * v_c).sum(-1)) - 1  # (B,)
    g_neg = torch.sigmoid(torch.einsum("bkd,bd->bk", u_neg, v_c))  # (B, K)
    grad_v = g_pos[:, None] * u_o + torch.einsum("bk,bkd->bd", g_neg, u_neg)  # (B, D)
    grad_u_o = g_pos[:, None] * v_c  # (B, D)
    grad_u_neg = g_neg[:, :, None] * v_c[:, None, :]  # (B, K, D)
    return grad_v, grad_u_o, grad_u_neg


class SkipGramNS(nn.Module):
    """Input vectors ``v`` and output vectors ``u`` (V, D); forward gives L per pair.

    Initialisation as the C code: v ~ U(−0.5/D, 0.5/D), u = 0. Both tables produce
    sparse gradients (for ``SparseAdam``).

    Shapes:
        c: (B,)   o: (B,)   neg: (B, K)   returns: (B,)
    """

    def __init__(self, V: int, D: int) -> None:
        super().__init__()
        self.V, self.D = V, D
        self.v = nn.Embedding(V, D, sparse=True)  # input (centre) vectors
        self.u = nn.Embedding(V, D, sparse=True)  # output (context) vectors
        with torch.no_grad():
            self.v.weight.uniform_(-0.5 / D, 0.5 / D)
            self.u.weight.zero_()

    def forward(self, c: Tensor, o: Tensor, neg: Tensor) -> Tensor:
        return sgns_loss(self.v(c), self.u(o), self.u(neg))  # (B,)


def train_sgns(
    corpus: EmbeddingCorpus,
    dim: int = 100,
    window: int = 5,
    negatives: int = 5,
    t: float = 1e-4,
    epochs: int = 10,
    minutes: float | None = None,
    batch_size: int = 4096,
    lr: float = 0.003,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> TrainedVectors:
    """Train SGNS on ``corpus`` for ``epochs`` passes or until ``minutes`` run out.

    Each epoch draws a new subsample and new window radii, builds all pairs, shuffles them
    and takes SparseAdam steps on the mean loss of ``batch_size`` pairs with ``negatives``
    noise words each. ``t`` is the subsampling threshold (the paper suggests ~1e-5 for
    billion-word corpora; 1e-4 suits the ~1.4M tokens here).
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SkipGramNS(corpus.V, dim)
    opt = torch.optim.SparseAdam(list(model.parameters()), lr=lr)
    P_n = noise_distribution(corpus.counts)  # (V,)
    p_keep = keep_probability(corpus.counts, t)  # (V,)
    start = time.perf_counter()
    deadline = math.inf if minutes is None else start + 60.0 * minutes
    losses: list[float] = []
    done = 0.0
    for epoch in range(epochs):
        ids, sentence = subsample(corpus.ids, corpus.sentence, p_keep, g)  # (N',) (N',)
        c_all, o_all = skipgram_pairs(ids, sentence, window, g)  # (P,) (P,)
        order = torch.randperm(c_all.numel(), generator=g)  # (P,)
        total, n_batches, steps = 0.0, max(1, math.ceil(order.numel() / batch_size)), 0
        for s in range(0, order.numel(), batch_size):
            batch = order[s : s + batch_size]  # (B,)
            neg = sample_noise(P_n, (batch.numel(), negatives), g)  # (B, K)
            loss = model(c_all[batch], o_all[batch], neg).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
            if time.perf_counter() > deadline:
                break
        losses.append(total / max(steps, 1))
        done = epoch + steps / n_batches
        if log is not None:
            log(f"sgns epoch {done:.2f}: {c_all.numel():,} pairs, loss {losses[-1]:.4f}")
        if time.perf_counter() > deadline:
            break
    vectors = WordVectors(list(corpus.words), model.v.weight.detach().clone())
    return TrainedVectors(vectors, done, time.perf_counter() - start, losses)
