"""The two ensemble rules of seqlab.eval.ensemble: the mean of probabilities by hand, and the
stacked log-linear pool's fit (optimality, its limit, recovery of planted weights)."""

import pytest
import torch

from seqlab.eval.ensemble import (
    LogLinearPool,
    fit_log_linear_pool,
    mean_probability,
    pool_loss,
)


def _members(m: int, n: int, c: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, n, c, generator=g, dtype=torch.float64).mul(2).log_softmax(-1)


def test_mean_probability_by_hand():
    p1 = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)
    p2 = torch.tensor([[0.5, 0.5], [0.6, 0.4]], dtype=torch.float64)
    got = mean_probability(torch.stack([p1, p2]).log())
    want = torch.tensor([[0.7, 0.3], [0.4, 0.6]], dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=1e-15, rtol=0)


def test_pool_logits_by_hand():
    lp = torch.tensor([[[-0.1, -2.3]], [[-0.7, -0.7]]], dtype=torch.float64)  # (2, 1, 2)
    pool = LogLinearPool(torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.0]))
    want = torch.tensor([[2 * -0.1 - -0.7 + 0.5, 2 * -2.3 - -0.7]], dtype=torch.float64)
    torch.testing.assert_close(pool.logits(lp), want, atol=1e-15, rtol=0)


def test_the_fit_is_the_minimum_of_the_convex_loss():
    lp = _members(3, 400, 3)
    y = torch.randint(0, 3, (400,), generator=torch.Generator().manual_seed(1))
    pool = fit_log_linear_pool(lp, y, l2=1e-2)
    w = pool.weights.clone().requires_grad_(True)
    b = pool.bias.clone().requires_grad_(True)
    loss = pool_loss(lp, y, w, b, 1e-2)
    gw, gb = torch.autograd.grad(loss, (w, b))
    assert float(gw.abs().max()) < 1e-7 and float(gb.abs().max()) < 1e-7
    geometric = pool_loss(
        lp,
        y,
        torch.full((3,), 1 / 3, dtype=torch.float64),
        torch.zeros(3, dtype=torch.float64),
        1e-2,
    )
    assert float(loss.detach()) <= float(geometric)
    g = torch.Generator().manual_seed(2)
    for _ in range(5):  # any other point is no better
        dw = torch.randn(3, generator=g, dtype=torch.float64) * 0.1
        db = torch.randn(3, generator=g, dtype=torch.float64) * 0.1
        assert float(pool_loss(lp, y, w.detach() + dw, b.detach() + db, 1e-2)) > float(
            loss.detach()
        )


def test_a_strong_pull_gives_the_geometric_mean():
    lp = _members(4, 200, 2)
    y = torch.randint(0, 2, (200,), generator=torch.Generator().manual_seed(3))
    pool = fit_log_linear_pool(lp, y, l2=1e6)
    torch.testing.assert_close(
        pool.weights, torch.full((4,), 0.25, dtype=torch.float64), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(pool.bias, torch.zeros(2, dtype=torch.float64), atol=1e-4, rtol=0)


def test_planted_weights_are_recovered():
    # Labels drawn from the pool itself: member 0 counts twice, member 1 not at all, member 2
    # half, with a class bias. 20,000 examples pin the weights to about ±0.05.
    lp = _members(3, 20_000, 2, seed=4)
    true = LogLinearPool(torch.tensor([2.0, 0.0, 0.5]), torch.tensor([0.3, -0.3]))
    probs = true.logits(lp).softmax(-1)
    y = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5)).squeeze(1)
    pool = fit_log_linear_pool(lp, y, l2=1e-6)
    torch.testing.assert_close(pool.weights, true.weights.double(), atol=0.08, rtol=0)
    # Only b_0 − b_1 is identified by softmax; the L2 term splits it evenly.
    assert abs(float(pool.bias[0] - pool.bias[1]) - 0.6) < 0.08


def test_bad_input_is_refused():
    lp = _members(2, 5, 2)
    with pytest.raises(ValueError, match="members, examples, classes"):
        fit_log_linear_pool(lp[0], torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"y must have shape \(5,\)"):
        fit_log_linear_pool(lp, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="l2 must be > 0"):
        fit_log_linear_pool(lp, torch.zeros(5, dtype=torch.long), l2=0.0)
    with pytest.raises(ValueError, match="no held-out examples"):
        fit_log_linear_pool(lp[:, :0], torch.zeros(0, dtype=torch.long))
    bad = lp.clone()
    bad[0, 0, 0] = float("-inf")
    with pytest.raises(ValueError, match="inf or nan"):
        fit_log_linear_pool(bad, torch.zeros(5, dtype=torch.long))
