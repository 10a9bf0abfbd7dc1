"""Tests for seqlab.nn.attention: score functions and the single-head Attention layer."""

import math

import pytest
import torch
from torch.func import functional_call

from seqlab.nn.attention import Attention, dot, make_score, scaled_dot
from seqlab.nn.masks import causal_mask, padding_mask

SCORES = ["additive", "dot", "general", "concat", "scaled_dot"]


# --- the notes' worked example (000_*.txt, "How to calculate self-attention?") -----------


def _notes_qk() -> tuple[torch.Tensor, torch.Tensor]:
    """q_1 and k_1, k_2 with d_k = 64 and q_1·k_1 = 112, q_1·k_2 = 96 exactly."""
    q = torch.ones(1, 1, 64)  # (B, T, d_k)
    k = torch.stack([torch.full((64,), 1.75), torch.full((64,), 1.5)]).unsqueeze(0)  # (1, 2, 64)
    return q, k


def test_notes_example_scores_and_weights():
    q, k = _notes_qk()
    assert dot(q, k).flatten().tolist() == [112.0, 96.0]  # exact: small integers in fp32
    e = scaled_dot(q, k)  # divide by √d_k = 8
    assert e.flatten().tolist() == [14.0, 12.0]  # exact
    alpha = torch.softmax(e, dim=-1).flatten()
    # The notes round to two decimals: 0.88 and 0.12 (abs tolerance 0.005).
    assert alpha.tolist() == pytest.approx([0.88, 0.12], abs=0.005)
    # Exact value: e^14 / (e^14 + e^12) = 1 / (1 + e^-2) (rel tolerance 1e-6).
    assert alpha[0].item() == pytest.approx(1 / (1 + math.exp(-2)), rel=1e-6)


def test_notes_example_through_attention_layer():
    q, k = _notes_qk()
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, Dv): z_1 = α_1 v_1 + α_2 v_2
    attn = Attention(64, 64, score="scaled_dot")
    z, alpha = attn(q, k, v)
    assert alpha.flatten().tolist() == pytest.approx([0.88, 0.12], abs=0.005)
    expected = 1 / (1 + math.exp(-2))
    assert z.flatten().tolist() == pytest.approx([expected, 1 - expected], rel=1e-6)


# --- each score against its equation, written as an explicit loop ----------------------


def _set(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    with torch.no_grad():
        param.copy_(value)


def _loop_scores(score: str, attn: Attention, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """e[b, i, j] computed one entry at a time from the paper's formula (float64)."""
    B, T, _ = s.shape
    S = h.shape[1]
    e = torch.empty(B, T, S, dtype=torch.float64)
    m = attn.score
    for b in range(B):
        for i in range(T):
            for j in range(S):
                s_i, h_j = s[b, i], h[b, j]
                if score == "dot":
                    e[b, i, j] = s_i @ h_j
                elif score == "scaled_dot":
                    e[b, i, j] = s_i @ h_j / math.sqrt(s.shape[-1])
                elif score == "general":
                    e[b, i, j] = s_i @ m.W_a.weight @ h_j
                elif score == "additive":
                    v_a = m.v_a.weight[0]
                    e[b, i, j] = v_a @ torch.tanh(m.W_a.weight @ s_i + m.U_a.weight @ h_j)
                else:  # concat
                    v_a = m.v_a.weight[0]
                    e[b, i, j] = v_a @ torch.tanh(m.W_a.weight @ torch.cat([s_i, h_j]))
    return e


@pytest.mark.parametrize("score", SCORES)
def test_score_matches_loop_formula(score):
    same = score in ("dot", "scaled_dot")
    Dq, Dk, A = (5, 5, 3) if same else (5, 4, 3)
    attn = Attention(Dq, Dk, score=score, attn_dim=A).double()
    for p in attn.parameters():  # hand-set (seeded) weights, not the default init
        _set(p, torch.randn_like(p))
    s = torch.randn(2, 3, Dq, dtype=torch.float64)  # (B, T, Dq)
    h = torch.randn(2, 4, Dk, dtype=torch.float64)  # (B, S, Dk)
    e = attn.score(s, h)
    torch.testing.assert_close(e, _loop_scores(score, attn, s, h), atol=1e-12, rtol=0)
    # The attention weights and context follow Bahdanau eqs. 5–6 (atol 1e-12).
    c, alpha = attn(s, h)
    torch.testing.assert_close(alpha, torch.softmax(e, -1), atol=1e-12, rtol=0)
    torch.testing.assert_close(c, torch.einsum("bts,bsd->btd", alpha, h), atol=1e-12, rtol=0)


def test_additive_hand_computed():
    # Wₐ = Uₐ = I, vₐ = (1, 1): e = tanh(s_1 + h_1) + tanh(s_2 + h_2).
    attn = Attention(2, 2, score="additive", attn_dim=2).double()
    _set(attn.score.W_a.weight, torch.eye(2))
    _set(attn.score.U_a.weight, torch.eye(2))
    _set(attn.score.v_a.weight, torch.ones(1, 2))
    s = torch.zeros(1, 1, 2, dtype=torch.float64)
    a = math.atanh(0.5)
    h = torch.tensor([[[0.0, 0.0], [a, a], [a, -a]]], dtype=torch.float64)
    assert attn.score(s, h).flatten().tolist() == pytest.approx([0.0, 1.0, 0.0], abs=1e-12)


def test_general_and_concat_hand_computed():
    general = Attention(2, 2, score="general").double()
    _set(general.score.W_a.weight, torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
    h_t = torch.tensor([[[1.0, 1.0]]], dtype=torch.float64)
    h_bar = torch.tensor([[[1.0, 2.0], [0.0, -3.0]]], dtype=torch.float64)
    # h_tᵀ Wₐ h̄ = (1, 1)·(2, 2) = 4 and (1, 1)·(0, −3) = −3 (exact).
    assert general.score(h_t, h_bar).flatten().tolist() == [4.0, -3.0]
    concat = Attention(2, 2, score="concat", attn_dim=1).double()
    _set(concat.score.W_a.weight, torch.tensor([[1.0, 0.0, 0.0, 1.0]]))  # picks h_t1 + h̄_s2
    _set(concat.score.v_a.weight, torch.tensor([[2.0]]))
    expected = [2 * math.tanh(1.0 + 2.0), 2 * math.tanh(1.0 - 3.0)]
    assert concat.score(h_t, h_bar).flatten().tolist() == pytest.approx(expected, abs=1e-12)


# --- precomputed keys and single decoder steps ------------------------------------------


@pytest.mark.parametrize("score", SCORES)
def test_single_step_and_precomputed_keys(score):
    attn = Attention(6, 6, score=score, attn_dim=4)
    s = torch.randn(3, 5, 6)  # (B, T, Dq)
    h = torch.randn(3, 7, 6)  # (B, S, Dk)
    values = torch.randn(3, 7, 2)  # (B, S, Dv) with Dv ≠ Dk
    mask = padding_mask(torch.tensor([7, 4, 1]))  # (B, S)
    c_all, a_all = attn(s, h, values, mask)
    assert c_all.shape == (3, 5, 2) and a_all.shape == (3, 5, 7)
    pre = attn.precompute_keys(h)
    for t in range(5):  # one decoder step at a time, keys projected once (atol 1e-6, fp32)
        c_t, a_t = attn(s[:, t], h, values, mask, precomputed_keys=pre)
        assert c_t.shape == (3, 2) and a_t.shape == (3, 7)
        torch.testing.assert_close(c_t, c_all[:, t], atol=1e-6, rtol=0)
        torch.testing.assert_close(a_t, a_all[:, t], atol=1e-6, rtol=0)


def test_additive_precompute_holds_U_a_h():
    attn = Attention(4, 3, score="additive", attn_dim=5)
    h = torch.randn(2, 6, 3)
    pre = attn.precompute_keys(h)
    torch.testing.assert_close(pre, h @ attn.score.U_a.weight.t(), atol=1e-6, rtol=0)
    assert pre.shape == (2, 6, 5)


# --- masks -------------------------------------------------------------------------------


@pytest.mark.parametrize("score", SCORES)
def test_masks_zero_weights_rows_sum_to_one_and_fully_masked_rows(score):
    attn = Attention(4, 4, score=score, attn_dim=3)
    s = torch.randn(3, 4, 4, requires_grad=True)  # (B, T, Dq)
    h = torch.randn(3, 5, 4, requires_grad=True)  # (B, S, Dk)
    mask = padding_mask(torch.tensor([5, 2, 0]), max_len=5)  # batch row 2 is fully masked
    c, alpha = attn(s, h, mask=mask)
    assert (alpha[1, :, 2:] == 0).all()  # masked keys get weight exactly 0
    torch.testing.assert_close(alpha[:2].sum(-1), torch.ones(2, 4), atol=1e-6, rtol=0)
    assert (alpha[2] == 0).all() and (c[2] == 0).all()  # fully masked: zeros, no NaN
    (c.square().sum() + alpha.square().sum()).backward()
    for t in [s.grad, h.grad, *[p.grad for p in attn.parameters()]]:
        assert torch.isfinite(t).all()
    assert (s.grad[2] == 0).all() and (h.grad[2] == 0).all()
    assert (h.grad[1, 2:] == 0).all()  # masked keys receive no gradient (values = keys)


def test_causal_3d_mask():
    attn = Attention(4, 4, score="dot")
    x = torch.randn(2, 5, 4)
    _, alpha = attn(x, x, mask=causal_mask(5).unsqueeze(0))  # (1, T, S)
    assert (alpha.triu(diagonal=1) == 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 5), atol=1e-6, rtol=0)


# --- gradcheck (float64) -----------------------------------------------------------------


@pytest.mark.parametrize("score", SCORES)
def test_gradcheck(score):
    attn = Attention(3, 3, score=score, attn_dim=2).double()
    params = dict(attn.named_parameters())
    names = list(params)
    s = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 4, 2, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])

    def f(s, h, v, *ps):
        return functional_call(attn, dict(zip(names, ps)), (s, h, v, mask))

    inputs = (s, h, v, *[p.detach().clone().requires_grad_() for p in params.values()])
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5)


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
def test_dot_needs_equal_dims(score):
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        Attention(4, 5, score=score)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown score"):
        make_score("cosine", 4, 4)  # type: ignore[arg-type]
    attn = Attention(4, 5, score="general")
    with pytest.raises(ValueError, match="query last dim must be 4"):
        attn(torch.randn(2, 3, 5), torch.randn(2, 6, 5))
    with pytest.raises(ValueError, match="keys last dim must be 5"):
        attn(torch.randn(2, 3, 4), torch.randn(2, 6, 4))
