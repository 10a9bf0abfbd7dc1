"""PPMI with context distribution smoothing on a hand example; truncated SVD; training."""

import math

import torch

from seqlab.data.embedding_corpus import build_corpus, planted_corpus
from seqlab.eval.word_vectors import analogy_accuracy
from seqlab.models.ppmi_svd import ppmi, ppmi_svd_vectors, train_ppmi_svd

COUNTS = torch.tensor([[2.0, 1.0], [1.0, 0.0]])  # Σ = 4, #(w) = #(c) = (3, 1)


def test_ppmi_hand_example_without_smoothing():
    # PMI = log(#(w,c)·Σ / (#(w)·#(c))): (0,0) log 8/9 < 0 → 0; (0,1), (1,0) log 4/3
    expected = torch.tensor([[0.0, math.log(4 / 3)], [math.log(4 / 3), 0.0]], dtype=torch.float64)
    torch.testing.assert_close(ppmi(COUNTS, alpha=1.0), expected, atol=1e-12, rtol=0)


def test_ppmi_hand_example_with_context_smoothing():
    # P̂_0.75(c) = (3^0.75, 1) / (3^0.75 + 1); P̂(w) = (3/4, 1/4); P̂(w, c) = #(w, c) / 4
    P_c = [3**0.75 / (3**0.75 + 1), 1 / (3**0.75 + 1)]
    expected = torch.tensor(
        [
            [max(0.0, math.log(0.5 / (0.75 * P_c[0]))), math.log(0.25 / (0.75 * P_c[1]))],
            [math.log(0.25 / (0.25 * P_c[0])), 0.0],  # count 0 → 0 (not −inf)
        ],
        dtype=torch.float64,
    )
    assert expected[0, 0] == 0.0 and expected[0, 1] > 0  # log 0.959 clipped; log 1.093 kept
    torch.testing.assert_close(ppmi(COUNTS), expected, atol=1e-12, rtol=0)


def test_sparse_and_dense_paths_agree():
    g = torch.Generator().manual_seed(0)
    X = torch.randint(0, 4, (6, 5), generator=g).double()  # (6, 5) with zeros
    dense = ppmi(X)
    sparse = ppmi(X.to_sparse()).to_dense()
    torch.testing.assert_close(sparse, dense, atol=1e-12, rtol=0)
    assert (dense >= 0).all() and (dense[X == 0] == 0).all()


def test_svd_with_half_eigenvalue_weighting_factorises_a_psd_matrix():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(8, 2, generator=g, dtype=torch.float64)
    M = A @ A.T  # (8, 8) PSD of rank 2: U Σ Uᵀ, so W = U Σ^½ gives W Wᵀ = M
    W = ppmi_svd_vectors(M, dim=2, p=0.5).double()
    torch.testing.assert_close(W @ W.T, M, atol=1e-4, rtol=1e-4)


def test_planted_analogies_are_solved():
    sentences, questions = planted_corpus(2000, n_rows=4, seed=0)
    run = train_ppmi_svd(build_corpus(sentences, min_count=1), dim=8, window=4)
    assert run.vectors.vectors.shape == (26, 8)
    assert analogy_accuracy(run.vectors, {"planted": questions}).sections["planted"] == (12, 12, 12)
