"""Count-based baseline: positive PMI with context distribution smoothing, then truncated
SVD (Levy, Goldberg, Dagan 2015, "Improving Distributional Similarity with Lessons
Learned from Word Embeddings", §3.2–3.3).

    PPMI(w, c) = max(0, log [ P̂(w, c) / (P̂(w) P̂_α(c)) ])
    P̂(w, c) = #(w, c) / Σ #,   P̂(w) = #(w) / Σ #,   P̂_α(c) = #(c)^α / Σ_c' #(c')^α

with #(w) = Σ_c #(w, c), #(c) = Σ_w #(w, c) and α = 0.75 (context distribution
smoothing, "cds"). Then M = PPMI ≈ U_d Σ_d V_dᵀ and the word vectors are W = U_d Σ_d^p
(eigenvalue weighting p; Levy et al. find p = 0.5 or 0 better than the classic p = 1).

The counts #(w, c) are :func:`seqlab.models.glove.cooccurrence` (symmetric window, 1/d
weighting by default, as GloVe), so the baseline sees the same statistics as GloVe.
The SVD is scikit-learn's ``TruncatedSVD`` (randomized) on the sparse matrix.

Deviations: none in the formulas; the 1/d-weighted counts replace Levy's word2vec-style
dynamic window (both down-weight distant contexts).
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
import torch
from scipy import sparse
from sklearn.decomposition import TruncatedSVD
from torch import Tensor

from seqlab.data.embedding_corpus import EmbeddingCorpus
from seqlab.data.word_vectors_io import TrainedVectors, WordVectors
from seqlab.models.glove import cooccurrence

__all__ = ["ppmi", "ppmi_svd_vectors", "train_ppmi_svd"]


def ppmi(counts: Tensor, alpha: float = 0.75) -> Tensor:
    """PPMI of a co-occurrence count matrix with context smoothing α (dense or sparse COO;
    the result has the same layout, zeros where the count is zero).

    Shapes:
        counts: (V, C)   returns: (V, C) float64
    """
    X = counts.coalesce().double() if counts.is_sparse else counts.double()  # (V, C)
    total = X.sum()
    n_w = X.sum(1).to_dense() if X.is_sparse else X.sum(1)  # (V,) #(w)
    n_c = X.sum(0).to_dense() if X.is_sparse else X.sum(0)  # (C,) #(c)
    P_w = n_w / total  # (V,)
    P_c_alpha = n_c.pow(alpha) / n_c.pow(alpha).sum()  # (C,)
    if X.is_sparse:
        i, c = X.indices()  # (nnz,) (nnz,)
        pmi = torch.log(X.values() / total / (P_w[i] * P_c_alpha[c]))  # (nnz,)
        M = torch.sparse_coo_tensor(X.indices(), pmi.clamp(min=0), X.shape, check_invariants=True)
        return M.coalesce()  # (V, C)
    with torch.no_grad():
        pmi = torch.log(X / total / (P_w[:, None] * P_c_alpha[None, :]))  # (V, C), -inf at 0
    return torch.where(X > 0, pmi.clamp(min=0), torch.zeros_like(pmi))  # (V, C)


def ppmi_svd_vectors(M: Tensor, dim: int, p: float = 0.5, seed: int = 0) -> Tensor:
    """W = U_d Σ_d^p from the truncated SVD of M (sparse COO or dense).

    Shapes:
        M: (V, C)   returns: (V, dim) float32
    """
    if M.is_sparse:
        i, c = M.indices().numpy()
        A = sparse.csr_matrix((M.values().numpy(), (i, c)), shape=tuple(M.shape))
    else:
        A = M.numpy()
    k = min(dim, min(A.shape) - 1)
    svd = TruncatedSVD(k, algorithm="randomized", n_iter=7, random_state=seed)
    US = svd.fit_transform(A)  # (V, k) = U_d Σ_d
    sigma = svd.singular_values_  # (k,)
    W = US * np.power(sigma, p - 1.0)  # (V, k) = U_d Σ_d^p
    if k < dim:  # fewer words than requested dimensions: pad with zero components
        W = np.pad(W, ((0, 0), (0, dim - k)))  # (V, dim)
    return torch.from_numpy(np.ascontiguousarray(W)).float()  # (V, dim)


def train_ppmi_svd(
    corpus: EmbeddingCorpus,
    dim: int = 100,
    window: int = 5,
    alpha: float = 0.75,
    p: float = 0.5,
    weighting: Literal["harmonic", "uniform"] = "harmonic",
    seed: int = 0,
) -> TrainedVectors:
    """Counts → PPMI (cds α) → truncated SVD → U_d Σ_d^p."""
    start = time.perf_counter()
    X = cooccurrence(corpus.ids, corpus.sentence, corpus.V, window, weighting)  # (V, V)
    W = ppmi_svd_vectors(ppmi(X, alpha), dim, p, seed)  # (V, dim)
    return TrainedVectors(WordVectors(list(corpus.words), W), 1.0, time.perf_counter() - start, [])
