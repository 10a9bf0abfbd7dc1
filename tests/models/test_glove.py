"""GloVe: exact co-occurrence counts by hand, the weighting function, the cost, training."""

import math

import pytest
import torch

from seqlab.data.embedding_corpus import build_corpus, planted_corpus
from seqlab.eval.word_vectors import analogy_accuracy
from seqlab.models.glove import (
    GloVe,
    cooccurrence,
    glove_adagrad,
    glove_loss,
    glove_weight,
    train_glove,
)


def _dense(X: torch.Tensor) -> torch.Tensor:
    return X.to_dense()


def test_cooccurrence_counts_by_hand_with_harmonic_weighting():
    # sentences "a b c a" and "b a" (a=0, b=1, c=2), window 2
    ids = torch.tensor([0, 1, 2, 0, 1, 0])
    sentence = torch.tensor([0, 0, 0, 0, 1, 1])
    X = _dense(cooccurrence(ids, sentence, V=3, window=2))
    # sentence 1, d=1: a-b, b-c, c-a (+1 each); d=2: a-c, b-a (+1/2 each). sentence 2: b-a +1
    expected = torch.tensor(
        [
            [0.0, 1 + 0.5 + 1, 1 + 0.5],  # a: b at d=1 (twice) and d=2; c at d=1 and d=2
            [2.5, 0.0, 1.0],  # b: symmetric
            [1.5, 1.0, 0.0],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(X, expected, atol=0, rtol=0)
    torch.testing.assert_close(X, X.T, atol=0, rtol=0)


def test_cooccurrence_window_one_uniform_and_a_repeated_word():
    ids = torch.tensor([0, 0, 1])  # "a a b": the pair (a, a) adds to X_aa twice (both orders)
    X = _dense(
        cooccurrence(ids, torch.zeros(3, dtype=torch.long), V=2, window=1, weighting="uniform")
    )
    torch.testing.assert_close(X, torch.tensor([[2.0, 1.0], [1.0, 0.0]], dtype=torch.float64))
    X2 = _dense(cooccurrence(ids, torch.zeros(3, dtype=torch.long), V=2, window=2))
    # window 2 adds (a, b) at distance 2 with weight 1/2
    torch.testing.assert_close(X2, torch.tensor([[2.0, 1.5], [1.5, 0.0]], dtype=torch.float64))


def test_weighting_function_values():
    x = torch.tensor([1.0, 50.0, 100.0, 1000.0], dtype=torch.float64)
    expected = torch.tensor([0.01**0.75, 0.5**0.75, 1.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(glove_weight(x), expected, atol=1e-15, rtol=0)
    torch.testing.assert_close(
        glove_weight(torch.tensor([5.0]), x_max=10.0, alpha=1.0), torch.tensor([0.5])
    )


def test_cost_terms_by_hand():
    w = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    w_tilde = torch.tensor([[2.0, 3.0], [2.0, 3.0]])
    b, b_tilde = torch.tensor([0.5, 0.5]), torch.tensor([-0.5, -0.5])
    X = torch.tensor([math.e**2, math.e])  # log X = 2, 1; wᵀw̃ + b + b̃ = 2
    expected = torch.tensor([0.0, (math.e / 100.0) ** 0.75 * 1.0])
    torch.testing.assert_close(glove_loss(w, w_tilde, b, b_tilde, X), expected, atol=1e-6, rtol=0)


def test_cost_gradcheck_float64():
    g = torch.Generator().manual_seed(0)
    args = [
        torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True),
        torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True),
        torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True),
        torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True),
        torch.tensor([0.5, 20.0, 300.0], dtype=torch.float64),
    ]
    assert torch.autograd.gradcheck(glove_loss, tuple(args), eps=1e-6, atol=1e-8)


def test_model_word_vectors_are_w_plus_w_tilde_and_forward_matches_cost():
    model = GloVe(5, 3)
    torch.testing.assert_close(model.word_vectors(), model.W.weight + model.W_tilde.weight)
    i, j, X = torch.tensor([0, 4]), torch.tensor([1, 2]), torch.tensor([3.0, 200.0])
    ref = glove_loss(
        model.W.weight[i],
        model.W_tilde.weight[j],
        model.b.weight[i, 0],
        model.b_tilde.weight[j, 0],
        X,
    )
    torch.testing.assert_close(model(i, j, X), ref, atol=0, rtol=0)


def test_loss_decreases_and_planted_analogies_are_solved():
    sentences, questions = planted_corpus(2000, n_rows=4, seed=0)
    corpus = build_corpus(sentences, min_count=1)
    run = train_glove(corpus, dim=16, window=4, epochs=100, batch_size=64, x_max=10.0)
    assert run.losses[-1] < 0.05 * run.losses[0]
    assert all(b <= a * 1.05 for a, b in zip(run.losses, run.losses[1:]))  # ~monotone
    result = analogy_accuracy(run.vectors, {"planted": questions})
    assert result.sections["planted"] == (12, 12, 12)


def test_glove_c_adagrad_steps_as_the_reference_code():
    """glove.c: w -= η·g / √gradsq, then gradsq += (η·g)², gradsq from 1; torch's AdaGrad
    adds g² before dividing, so the step is g / √(1/η² + Σ_{s≤t} g_s²)."""
    eta, grads = 0.05, [torch.tensor([0.3, -2.0]), torch.tensor([0.1, 0.5])]
    w = torch.zeros(2, requires_grad=True)
    opt = glove_adagrad([w], eta, "glove.c")
    ref, gradsq = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    for g in grads:
        w.grad = g.clone()
        opt.step()
        gradsq += (eta * g.double()) ** 2
        ref -= eta * g.double() / gradsq.sqrt()
        torch.testing.assert_close(w.detach().double(), ref, rtol=1e-6, atol=1e-9)
    # the paper's form moves every coordinate by η on its first step, whatever g is
    v = torch.zeros(2, requires_grad=True)
    v.grad = torch.tensor([1e-4, -3.0])
    glove_adagrad([v], eta, "paper").step()
    torch.testing.assert_close(v.detach(), torch.tensor([-eta, eta]), rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="adagrad must be"):
        glove_adagrad([v], eta, "adam")


def test_subsampling_before_counting_drops_frequent_words_only(monkeypatch):
    import seqlab.models.glove as glove_module

    # "the" is every other token (f = 0.5); the 2,000 other words once each (f = 1/4,000).
    words = [f"w{i}" for i in range(2000)]
    sentences = [[t for w in words[k : k + 10] for t in ("the", w)] for k in range(0, 2000, 10)]
    corpus = build_corpus(sentences, min_count=1)
    counted = []
    real = glove_module.cooccurrence

    def spy(ids, sentence, V, window, weighting):
        counted.append((ids.clone(), sentence.clone()))
        return real(ids, sentence, V, window, weighting)

    monkeypatch.setattr(glove_module, "cooccurrence", spy)
    t = 1e-3  # keep "the" with probability √(1e-3 / 0.5) ≈ 0.045; every other word always
    for subsample in (None, t, t):
        train_glove(corpus, dim=4, window=2, epochs=1, subsample=subsample)
    (all_ids, all_sent), (ids, sent), (again, _) = counted
    assert torch.equal(all_ids, corpus.ids) and torch.equal(all_sent, corpus.sentence)
    assert torch.equal(ids, again)  # drawn from the seed
    frequent = torch.bincount(corpus.ids).argmax()  # "the"
    kept = int((ids == frequent).sum()) / int((corpus.ids == frequent).sum())
    assert 0.02 < kept < 0.08  # ≈ 0.045 of 2,000
    rare = corpus.ids != frequent
    assert torch.equal(ids[ids != frequent], corpus.ids[rare])  # all kept, in order
    assert torch.equal(sent[ids != frequent], corpus.sentence[rare])
