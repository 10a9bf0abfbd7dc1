"""NB-weighted linear classifier over binarized word n-grams (Wang & Manning 2012,
"Baselines and Bigrams: Simple, Good Sentiment and Topic Classification", §2.3): the
strong non-neural baseline of every MR table (NBSVM-bi 79.4, MNB-bi 79.0), here trained
like any seqlab classifier and usable as an ensemble member.

    f̂ ∈ {0, 1}^F                   which n-grams (n ≤ N) occur in the sentence (binarized)
    p_c = α + Σ_{i: y_i = c} f̂_i    q_c = α + Σ_{i: y_i ≠ c} f̂_i        (F,)
    r_c = log(p_c / ‖p_c‖₁) − log(q_c / ‖q_c‖₁)                          log-count ratio
    logit_c = w_cᵀ (r_c ∘ f̂) + b_c                                       (r_c ∘ f̂: eq. 3's x̃)

With two classes r_1 = −r_0 is the paper's r. The log-count ratios are fitted once from
the training split (:meth:`NBLinearClassifier.fit_log_count_ratio`, called by the
classify task at the start of a fresh run) and saved with the weights; until then r = 1,
i.e. plain logistic regression on binarized n-grams.

Features: unigram ids are the word ids (0 … V−1); an n-gram of ids (x⟨t⟩ … x⟨t+n−1⟩), n ≥
2, goes to V + (hash mod K) with the polynomial hash h = ((x⟨t⟩·P + x⟨t+1⟩)·P + …),
P = 1,000,003 (fastText's way; colliding n-grams share a weight and a ratio). With
``gram_buckets`` G > 0 (the classify task's ``char_ngrams``) the character n-grams of
each word, ⟨w⟩ = "<" + w + ">" cut into n_min … n_max grams plus ⟨w⟩ itself (fastText's
subwords, Bojanowski et al. 2017; ids 1 … G from seqlab.data.char_ngrams), are features
too, at V + K + (id − 1), binarized with the rest: a test word the training split never
had is no longer only ``<unk>`` ("unfunny" shares "unf", "funn", "nny>" with seen words).
Not in Wang & Manning; subword features are the usual extension of NB-weighted n-gram
models.

Deviations from the paper: the loss is the task's softmax cross-entropy (logistic
regression on x̃, the "NB-LR" variant; the paper trains an L2 squared-hinge SVM with C = 1
and interpolates w' = (1 − β) w̄ + β w), optimised with the trainer's Adam with L2
weight decay and early stopping on validation accuracy; n-grams are hashed.

Shapes:
    x (B, T) long, mask (B, T) bool (prefix mask), grams (B, T, G') long (0 = none; only
    with gram_buckets > 0) -> logits (B, C)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.models.classifiers import EmbeddingInit, hash_extend
from seqlab.registry import MODELS

__all__ = [
    "NBLinearClassifier",
    "NBLinearConfig",
    "binarize",
    "char_gram_features",
    "log_count_ratio",
    "ngram_ids",
]


@dataclass(frozen=True)
class NBLinearConfig:
    """``ngram`` N (1 = unigrams only, 2 = uni + bigrams, …); ``buckets`` K hashed ids for
    the n-grams with n ≥ 2; ``alpha`` α, the smoothing count of the ratio."""

    ngram: int = 2
    buckets: int = 1 << 22
    alpha: float = 1.0

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"model.ngram must be >= 1, got {self.ngram}")
        if self.ngram > 1 and self.buckets < 1:
            raise ValueError(f"model.buckets must be >= 1 with ngram > 1, got {self.buckets}")
        if not self.alpha > 0.0:
            raise ValueError(f"model.alpha must be > 0, got {self.alpha}")


def ngram_ids(x: Tensor, mask: Tensor, n_max: int, vocab: int, buckets: int) -> Tensor:
    """Feature ids of every n-gram (1 ≤ n ≤ n_max) of each sentence; −1 where the n-gram
    runs into padding. Unigrams keep their word id; longer n-grams go to
    vocab + (polynomial hash mod buckets).

    Shapes: x (B, T) long, mask (B, T) bool -> (B, Σ_n (T − n + 1)) long
    """
    parts = [x.masked_fill(~mask, -1)]  # (B, T)
    h = x
    for n in range(2, n_max + 1):
        h = hash_extend(h[:, :-1], x[:, n - 1 :], buckets)  # (B, T − n + 1)
        real = mask[:, n - 1 :]  # the n-gram's last word is real (prefix mask)
        parts.append((h + vocab).masked_fill(~real, -1))
    return torch.cat(parts, 1)


def char_gram_features(grams: Tensor, offset: int) -> Tensor:
    """Feature ids of the words' character n-grams: id g ∈ [1, G] → offset + g − 1, −1 where
    there is none (0-padding of a word's bag, padding positions).

    Shapes: grams (B, T, G') long, 0 = none -> (B, T·G') long
    """
    return torch.where(grams > 0, grams + (offset - 1), -1).flatten(1)


def binarize(ids: Tensor) -> Tensor:
    """f̂: each feature of a row once. Returns the row-sorted ids with −1 at padding and at
    every repeat, so a feature present k times counts once.

    Shapes: ids (B, F) long, −1 = absent -> (B, F) long
    """
    s, _ = ids.sort(1)  # (B, F)
    repeat = torch.zeros_like(s, dtype=torch.bool)
    repeat[:, 1:] = s[:, 1:] == s[:, :-1]
    return s.masked_fill(repeat, -1)


def log_count_ratio(counts: Tensor, alpha: float) -> Tensor:
    """r_c = log(p_c/‖p_c‖₁) − log(q_c/‖q_c‖₁), p_c = α + counts_c, q_c = α + Σ_{c'≠c} counts_c'.

    Shapes: counts (C, F), in how many training sentences of class c feature j occurs
    -> r (C, F)
    """
    counts = counts.double()
    p = alpha + counts  # (C, F)
    q = alpha + (counts.sum(0, keepdim=True) - counts)  # (C, F)
    r = torch.log(p / p.sum(1, keepdim=True)) - torch.log(q / q.sum(1, keepdim=True))
    return r.float()


@MODELS.register("nbsvm", NBLinearConfig)
class NBLinearClassifier(nn.Module):
    """logit_c = Σ_{j ∈ f̂} W[j, c] · r[j, c] + b_c over the sentence's distinct n-grams
    (module docstring). W starts at 0; ``r`` is a buffer (saved in checkpoints)."""

    def __init__(
        self,
        cfg: NBLinearConfig,
        vocab: int,
        n_classes: int,
        pad_id: int = 0,
        embedding_init: EmbeddingInit | None = None,
        gram_buckets: int = 0,
    ) -> None:
        super().__init__()
        if embedding_init is not None:
            raise ValueError("nbsvm has no embedding table: unset task.embeddings_path")
        if gram_buckets < 0:
            raise ValueError(f"gram_buckets (task.char_ngrams) must be >= 0, got {gram_buckets}")
        self.cfg = cfg
        self.vocab = vocab
        self.gram_buckets = gram_buckets
        self.gram_offset = vocab + (cfg.buckets if cfg.ngram > 1 else 0)  # first char-gram id
        features = self.gram_offset + gram_buckets
        self.W = nn.Parameter(torch.zeros(features, n_classes))  # (F, C)
        self.b = nn.Parameter(torch.zeros(n_classes))  # (C,)
        self.register_buffer("r", torch.ones(features, n_classes))  # (F, C)

    def features(self, x: Tensor, mask: Tensor, grams: Tensor | None = None) -> Tensor:
        """f̂ as sorted distinct feature ids, −1 = none.
        (B, T), (B, T)[, (B, T, G')] -> (B, F')."""
        ids = ngram_ids(x, mask, self.cfg.ngram, self.vocab, self.cfg.buckets)  # (B, F_w)
        if self.gram_buckets:
            if grams is None:
                raise ValueError(
                    "this nbsvm was built with character n-grams (task.char_ngrams > 0) "
                    "and needs each batch's grams"
                )
            ids = torch.cat([ids, char_gram_features(grams, self.gram_offset)], 1)
        return binarize(ids)

    def forward(self, x: Tensor, mask: Tensor, grams: Tensor | None = None) -> Tensor:
        f = self.features(x, mask, grams)  # (B, F')
        present = (f >= 0).to(self.W.dtype)[..., None]  # (B, F', 1)
        j = f.clamp_min(0)  # (B, F')
        x_tilde_w = self.W[j] * self.r[j]  # (B, F', C)  w_c ∘ r_c at each present feature
        return (x_tilde_w * present).sum(1) + self.b  # (B, C)

    @torch.no_grad()
    def fit_log_count_ratio(self, batches: Iterable[tuple[Tensor, ...]]) -> None:
        """Set r from the training data: ``batches`` yields (x (B, T), mask (B, T), y (B,))
        or, with character n-grams, (x, mask, y, grams (B, T, G'))."""
        counts = torch.zeros_like(self.r.T, dtype=torch.float64)  # (C, F)
        device = counts.device
        for x, mask, y, *grams in batches:
            g = grams[0].to(device) if grams and grams[0] is not None else None
            f = self.features(x.to(device), mask.to(device), g)  # (B, F')
            rows = y.to(device)[:, None].expand_as(f)  # (B, F')
            keep = f >= 0
            counts.index_put_((rows[keep], f[keep]), counts.new_ones(()), accumulate=True)
        self.r.copy_(log_count_ratio(counts, self.cfg.alpha).T)
