"""Skip-gram with negative sampling: loss and gradient by hand, noise distribution,
subsampling, dynamic windows, and a planted analogy solved by the trained vectors."""

import math

import torch
import torch.nn.functional as F

from seqlab.data.embedding_corpus import build_corpus, planted_corpus
from seqlab.eval.word_vectors import analogy_accuracy
from seqlab.models.word2vec import (
    SkipGramNS,
    keep_probability,
    noise_distribution,
    sample_noise,
    sgns_grad,
    sgns_loss,
    skipgram_pairs,
    subsample,
    train_sgns,
)


def test_sgns_loss_equals_hand_computation():
    v_c = torch.tensor([[1.0, 0.5]])  # (1, 2)
    u_o = torch.tensor([[0.5, -1.0]])  # u_oᵀv_c = 0
    u_neg = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # u_kᵀv_c = 1, 1
    # −log σ(0) − 2·log σ(−1) = log 2 + 2·log(1 + e)
    expected = math.log(2.0) + 2.0 * math.log(1.0 + math.e)
    got = sgns_loss(v_c, u_o, u_neg)
    torch.testing.assert_close(got, torch.tensor([expected]), atol=1e-6, rtol=0)


def test_sgns_loss_equals_binary_cross_entropy_reference():
    g = torch.Generator().manual_seed(1)
    v_c, u_o = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    u_neg = torch.randn(6, 3, 5, generator=g)
    logits = torch.cat([(u_o * v_c).sum(-1, keepdim=True), (u_neg @ v_c[:, :, None])[..., 0]], 1)
    labels = torch.zeros(6, 4)
    labels[:, 0] = 1.0  # the observed context is the positive, the noise words negatives
    ref = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum(1)
    torch.testing.assert_close(sgns_loss(v_c, u_o, u_neg), ref, atol=1e-6, rtol=1e-6)


def test_closed_form_gradient_matches_autograd_and_gradcheck():
    g = torch.Generator().manual_seed(2)
    v_c = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    u_o = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    u_neg = torch.randn(4, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    sgns_loss(v_c, u_o, u_neg).sum().backward()
    grad_v, grad_u_o, grad_u_neg = sgns_grad(v_c.detach(), u_o.detach(), u_neg.detach())
    torch.testing.assert_close(grad_v, v_c.grad, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad_u_o, u_o.grad, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad_u_neg, u_neg.grad, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(sgns_loss, (v_c, u_o, u_neg), eps=1e-6, atol=1e-8)


def test_noise_distribution_is_unigram_to_the_three_quarters():
    counts = torch.tensor([1, 16, 81])  # count^0.75 = 1, 8, 27
    P_n = noise_distribution(counts)
    torch.testing.assert_close(P_n, torch.tensor([1.0, 8.0, 27.0], dtype=torch.float64) / 36)
    draws = sample_noise(P_n, (200_000,), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=3).double() / draws.numel()
    torch.testing.assert_close(freq, P_n, atol=5e-3, rtol=0)  # binomial sd ≤ 1.1e-3


def test_subsampling_keeps_sqrt_t_over_f():
    counts = torch.tensor([900, 90, 10])  # f = 0.9, 0.09, 0.01
    p_keep = keep_probability(counts, t=0.01)  # √(t/f) = 0.1054, 1/3, 1 (capped)
    expected = torch.tensor([math.sqrt(0.01 / 0.9), 1.0 / 3.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(p_keep, expected, atol=1e-12, rtol=0)
    ids = torch.arange(3).repeat(20_000)  # (60000,)
    kept, sentence = subsample(ids, torch.zeros_like(ids), p_keep, torch.Generator())
    rate = torch.bincount(kept, minlength=3).double() / 20_000
    torch.testing.assert_close(rate, expected, atol=0.015, rtol=0)  # sd ≤ 3.5e-3
    assert sentence.numel() == kept.numel()


def test_pairs_full_window_stay_inside_sentences():
    ids = torch.tensor([10, 11, 12, 13, 14])
    sentence = torch.tensor([0, 0, 0, 1, 1])
    c, o = skipgram_pairs(ids, sentence, window=2)
    got = sorted(zip(c.tolist(), o.tolist()))
    expected = sorted(
        [(10, 11), (11, 10), (11, 12), (12, 11), (10, 12), (12, 10), (13, 14), (14, 13)]
    )
    assert got == expected


def test_dynamic_window_samples_near_contexts_more_often():
    N, window = 30_000, 3
    ids = torch.arange(N)
    c, o = skipgram_pairs(ids, torch.zeros(N, dtype=torch.long), window, torch.Generator())
    distance = (c - o).abs()
    assert int(distance.min()) == 1 and int(distance.max()) == window
    # P(b ≥ d) = (window − d + 1) / window → expected pairs at distance d: 2N·that
    for d in range(1, window + 1):
        expected = 2 * N * (window - d + 1) / window
        assert abs(int((distance == d).sum()) - expected) < 0.02 * expected


def test_model_forward_is_the_loss_of_its_tables_with_sparse_gradients():
    model = SkipGramNS(7, 4)
    with torch.no_grad():
        model.u.weight.normal_()
    c, o, neg = torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([[5, 6], [0, 1]])
    loss = model(c, o, neg)
    ref = sgns_loss(model.v.weight[c], model.u.weight[o], model.u.weight[neg])
    torch.testing.assert_close(loss, ref, atol=0, rtol=0)
    loss.sum().backward()
    assert model.v.weight.grad.is_sparse and model.u.weight.grad.is_sparse


def test_trained_vectors_solve_the_planted_analogies():
    sentences, questions = planted_corpus(2000, n_rows=4, seed=0)
    corpus = build_corpus(sentences, min_count=1)
    run = train_sgns(corpus, dim=16, window=4, t=1.0, epochs=2, batch_size=256, lr=0.01)
    assert run.losses[-1] < run.losses[0]
    result = analogy_accuracy(run.vectors, {"planted": questions})
    assert result.sections["planted"] == (12, 12, 12)  # every one of the 12 questions


def test_time_budget_stops_training():
    corpus = build_corpus(planted_corpus(200, seed=1)[0], min_count=1)
    run = train_sgns(corpus, dim=8, t=1.0, epochs=50, minutes=0.0, batch_size=64)
    assert run.epochs < 1.0 and len(run.losses) == 1
