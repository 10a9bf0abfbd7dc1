"""Tests for seqlab.nn.multihead: MultiHeadAttention (fast and readable paths) and KVCache."""

import contextlib
import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from seqlab.nn.masks import attention_mask, causal_mask, padding_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention, always_sdpa

F64 = dict(atol=1e-10, rtol=0)  # float64 comparisons


def _torch_copy(mha: MultiHeadAttention, dropout: float = 0.0) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention holding our weights (in_proj = [W_q; W_k; W_v])."""
    bias = mha.W_q.bias is not None
    ref = nn.MultiheadAttention(
        mha.d_model, mha.n_heads, dropout=dropout, bias=bias, batch_first=True
    ).to(mha.W_q.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        ref.out_proj.weight.copy_(mha.W_o.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
            ref.out_proj.bias.copy_(mha.W_o.bias)
    return ref


def _param_grads(mha: MultiHeadAttention) -> list[torch.Tensor]:
    return [p.grad for p in (mha.W_q.weight, mha.W_k.weight, mha.W_v.weight, mha.W_o.weight)] + [
        p.grad for p in (mha.W_q.bias, mha.W_k.bias, mha.W_v.bias, mha.W_o.bias)
    ]


def _ref_param_grads(ref: nn.MultiheadAttention) -> list[torch.Tensor]:
    gw, gb = ref.in_proj_weight.grad, ref.in_proj_bias.grad
    return [*gw.chunk(3), ref.out_proj.weight.grad, *gb.chunk(3), ref.out_proj.bias.grad]


def _inputs(B=2, T=4, S=6, D=8, dtype=torch.float64):
    return [torch.randn(B, L, D, dtype=dtype, requires_grad=True) for L in (T, S, S)]


# --- the notes' worked example -----------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True])
def test_notes_example_one_head_identity_projections(need_weights):
    mha = MultiHeadAttention(64, 1, bias=False)
    for W in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
        nn.init.eye_(W.weight)
    q = torch.ones(1, 1, 64)  # "Thinking": q_1
    k = torch.stack([torch.full((64,), 1.75), torch.full((64,), 1.5)]).unsqueeze(0)  # k_1, k_2
    v = torch.zeros(1, 2, 64)
    v[0, 0, 0], v[0, 1, 1] = 1.0, 1.0  # v_1 = e_1, v_2 = e_2, so z_1 = (α_1, α_2, 0, …)
    z, alpha = mha(q, k, v, need_weights=need_weights)
    # q·k = 112, 96; / √64 = 14, 12; softmax ≈ 0.88, 0.12 (notes round: abs 0.005).
    assert z[0, 0, :2].tolist() == pytest.approx([0.88, 0.12], abs=0.005)
    a1 = 1 / (1 + math.exp(-2))
    assert z[0, 0, :2].tolist() == pytest.approx([a1, 1 - a1], rel=1e-6)
    if need_weights:
        assert alpha.shape == (1, 1, 1, 2)
        assert alpha.flatten().tolist() == pytest.approx([a1, 1 - a1], rel=1e-6)


# --- equality with torch.nn.MultiheadAttention (float64, atol 1e-10) ----------------------


MASKS = ["none", "padding", "causal", "padding+causal"]


def _masks(kind: str, B: int, T: int, S: int):
    """Our mask (True = keep) and torch's (key_padding_mask, attn_mask), True = IGNORE."""
    pad = padding_mask(torch.tensor([S, 2]), max_len=S) if "padding" in kind else None
    causal = causal_mask(T, S) if "causal" in kind else None  # shifted band, S > T
    ours = attention_mask(pad, causal)
    ref_kpm = None if pad is None else ~pad
    ref_attn = None if causal is None else ~causal
    return ours, ref_kpm, ref_attn


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "readable"])
@pytest.mark.parametrize("kind", MASKS)
def test_equals_torch_multihead_attention(kind, need_weights):
    B, T, S, D, H = 2, 4, 6, 8, 2
    mha = MultiHeadAttention(D, H).double()
    ref = _torch_copy(mha)
    mask, kpm, attn_mask = _masks(kind, B, T, S)
    q, k, v = _inputs(B, T, S, D)
    out, alpha = mha(q, k, v, mask=mask, need_weights=need_weights)
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref_out, ref_alpha = ref(
        q2, k2, v2, key_padding_mask=kpm, attn_mask=attn_mask, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, **F64)
    if need_weights:
        torch.testing.assert_close(alpha, ref_alpha, **F64)  # per head (B, H, T, S)
        _, ref_avg = ref(q2, k2, v2, key_padding_mask=kpm, attn_mask=attn_mask)
        torch.testing.assert_close(alpha.mean(1), ref_avg, **F64)  # averaged over heads
    else:
        assert alpha is None
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref_out * g).sum().backward()
    for a, b in zip((q, k, v), (q2, k2, v2)):
        torch.testing.assert_close(a.grad, b.grad, **F64)
    for a, b in zip(_param_grads(mha), _ref_param_grads(ref)):
        torch.testing.assert_close(a, b, **F64)


def test_equals_torch_self_attention_no_bias():
    mha = MultiHeadAttention(8, 4, bias=False).double()
    ref = _torch_copy(mha)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    out, _ = mha(x, x, x, mask=causal_mask(5))
    ref_out, _ = ref(x, x, x, attn_mask=~causal_mask(5), need_weights=False)
    torch.testing.assert_close(out, ref_out, **F64)


# --- fast path == readable path (values and gradients), fully masked rows ----------------


@pytest.mark.parametrize("kernel", ["cpu-matmul", "sdpa"])  # with grad on, §37
@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, F64), (torch.float32, dict(atol=1e-5, rtol=0))]
)
def test_fast_equals_readable_with_fully_masked_rows(dtype, tol, kernel):
    B, T, S, D, H = 3, 4, 5, 8, 2
    mha = MultiHeadAttention(D, H).to(dtype)
    pad = padding_mask(torch.tensor([5, 2, 0]), max_len=S)  # batch row 2: no key at all
    causal = causal_mask(T, S)
    causal[0] = False  # query 0 sees nothing in every batch row
    mask = attention_mask(pad, causal)  # (B, 1, T, S)
    inputs = _inputs(B, T, S, D, dtype)
    grads, outs = [], []
    for need_weights in (False, True):
        mha.zero_grad()
        q, k, v = (x.detach().clone().requires_grad_() for x in inputs)
        with always_sdpa() if kernel == "sdpa" else contextlib.nullcontext():
            out, _ = mha(q, k, v, mask=mask, need_weights=need_weights)
        out.square().sum().backward()
        outs.append(out)
        grads.append([q.grad, k.grad, v.grad, *[p.grad.clone() for p in mha.parameters()]])
        assert torch.isfinite(out).all()
        assert all(torch.isfinite(gr).all() for gr in grads[-1])
        # Rows that see no key give z = 0, so out = W_o's bias; and no gradient to the query.
        torch.testing.assert_close(out[2], mha.W_o.bias.expand(T, D), **tol)
        torch.testing.assert_close(out[:, 0], mha.W_o.bias.expand(B, D), **tol)
        assert (q.grad[2] == 0).all() and (q.grad[:, 0] == 0).all()
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **tol)


# --- one query row (a decoder step): matmul path == SDPA ----------------------------------


def _single_query_case(dtype):
    torch.manual_seed(3)
    B, S, D, H = 4, 7, 16, 4
    mha = MultiHeadAttention(D, H).to(dtype).eval()
    q = 3 * torch.randn(B, 1, D, dtype=dtype)  # large scores: softmax far from uniform
    kv = mha.project_kv(*(3 * torch.randn(B, S, D, dtype=dtype) for _ in range(2)))
    mask = padding_mask(torch.tensor([7, 3, 1, 0]), max_len=S)[:, None, None, :]  # row 3: none
    return mha, q, kv, mask


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, F64), (torch.float32, dict(atol=1e-6, rtol=0))]
)
def test_single_query_path_equals_sdpa(dtype, tol):
    mha, q, kv, mask = _single_query_case(dtype)
    with torch.no_grad():
        for m in (mask, None):
            out, _ = mha.attend(q, kv, m)  # (B, 1, D) through _single_query
            with always_sdpa():
                ref, _ = mha.attend(q, kv, m)
            torch.testing.assert_close(out, ref, **tol)
    # Row 3 keeps no key: z = 0, so the output is W_o's bias (SDPA's path gives it too, above).
    torch.testing.assert_close(mha.attend(q, kv, mask)[0][3, 0], mha.W_o.bias.detach(), **tol)


def test_single_query_path_under_bf16_autocast_is_as_accurate_as_sdpa():
    """Scores and softmax in float32, not bf16: the error against float64 stays SDPA's.

    With bf16 scores (rounded to 8 bits before the softmax) the error here is ~8x SDPA's.
    """
    torch.manual_seed(3)
    B, S, D, H = 64, 30, 64, 4
    mha = MultiHeadAttention(D, H).eval()
    with torch.no_grad():
        kv = mha.project_kv(*(6 * torch.randn(B, S, D) for _ in range(2)))
        kv = KVCache(kv.k.bfloat16(), kv.v.bfloat16())  # as autocast's projections give them
        h = mha._split_heads(mha.W_q(6 * torch.randn(B, 1, D))).bfloat16()  # (B, H, 1, Dh)
        kv64 = KVCache(kv.k.double(), kv.v.double())
        exact = MultiHeadAttention._readable(h.double(), kv64, None) @ kv64.v  # (B, H, 1, Dh)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            fast = MultiHeadAttention._fused(h, kv, None, 0.0)
            with always_sdpa():
                sdpa = MultiHeadAttention._fused(h, kv, None, 0.0)
    assert fast.dtype == sdpa.dtype == torch.bfloat16
    err_fast = (fast.double() - exact).abs().max().item()
    err_sdpa = (sdpa.double() - exact).abs().max().item()
    assert err_fast <= 2 * err_sdpa, (err_fast, err_sdpa)


def test_single_query_path_is_not_taken_in_training_with_dropout():
    mha, q, kv, mask = _single_query_case(torch.float32)
    mha.dropout = 0.5
    mha.train()
    torch.manual_seed(0)
    outs = {mha.attend(q, kv, mask)[0].sum().item() for _ in range(3)}
    assert len(outs) > 1  # dropout on the weights is applied (SDPA's dropout_p)


@pytest.mark.parametrize("kernel", ["cpu-matmul", "sdpa"])  # training's kernels, §37
def test_dropout_eval_equal_and_train_unbiased(kernel):
    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2, dropout=0.3)
    q = torch.randn(1, 3, 8)
    kv_in = torch.randn(1, 5, 8)
    mask = padding_mask(torch.tensor([4]), max_len=5)[:, None, None, :]  # (B, 1, 1, S)
    mha.eval()
    with torch.no_grad():
        fast, _ = mha(q, kv_in, kv_in, mask)
        readable, _ = mha(q, kv_in, kv_in, mask, need_weights=True)
        torch.testing.assert_close(fast, readable, atol=1e-6, rtol=0)
        torch.testing.assert_close(mha(q, kv_in, kv_in, mask)[0], fast, atol=0, rtol=0)
        # Training mode: inverted dropout on the weights keeps E[out] = eval out. The mean of
        # N = 4000 draws has std ≈ 0.004 here; tolerance atol 0.04 (10 std). Dropout without
        # the 1/(1 − p) rescaling would be off by ≈ 0.17.
        mha.train()
        N = 4000
        qN, kvN = q.expand(N, 3, 8), kv_in.expand(N, 5, 8)
        for need_weights in (False, True):
            with always_sdpa() if kernel == "sdpa" else torch.enable_grad():
                out, _ = mha(qN, kvN, kvN, mask, need_weights=need_weights)
            assert (out - fast).abs().max() > 0.1  # dropout is really applied
            torch.testing.assert_close(out.mean(0, keepdim=True), fast, atol=0.04, rtol=0)


# --- incremental decoding with a KV cache (float64, atol 1e-10) ---------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "readable"])
@pytest.mark.parametrize("chunk", [1, 2])
def test_cached_incremental_equals_full_causal(chunk, need_weights):
    B, T, D, H = 2, 6, 8, 2
    mha = MultiHeadAttention(D, H).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    pad = padding_mask(torch.tensor([6, 4]))  # (B, T) the target's own padding
    full, _ = mha(x, x, x, mask=attention_mask(pad, causal_mask(T)))
    cache: KVCache | None = None
    steps = []
    for t0 in range(0, T, chunk):
        x_t = x[:, t0 : t0 + chunk]  # the new positions only
        new = mha.project_kv(x_t, x_t)
        cache = new if cache is None else cache.cat(new)
        assert cache.length == t0 + chunk
        mask = attention_mask(pad[:, : cache.length], causal_mask(chunk, cache.length))
        out_t, _ = mha.attend(x_t, cache, mask=mask, need_weights=need_weights)
        steps.append(out_t)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **F64)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "readable"])
def test_future_perturbation_leaves_past_unchanged(need_weights):
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    y = x.clone()
    y[:, 3:] += torch.randn(2, 3, 8, dtype=torch.float64)  # change positions 3, 4, 5
    mask = causal_mask(6)
    out_x, _ = mha(x, x, x, mask=mask, need_weights=need_weights)
    out_y, _ = mha(y, y, y, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out_y[:, :3], out_x[:, :3], atol=1e-12, rtol=0)
    assert (out_y[:, 3:] - out_x[:, 3:]).abs().max() > 1e-3  # the future did change


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "readable"])
def test_extra_key_padding_changes_nothing(need_weights):
    B, T, S, D = 2, 3, 5, 8
    mha = MultiHeadAttention(D, 2).double()
    q, k, v = (x.detach() for x in _inputs(B, T, S, D))
    lengths = torch.tensor([5, 3])
    out, alpha = mha(q, k, v, padding_mask(lengths)[:, None, None, :], need_weights)
    garbage = 100 * torch.randn(B, 4, D, dtype=torch.float64)  # 4 more padded key positions
    k2, v2 = torch.cat([k, garbage], 1), torch.cat([v, -garbage], 1)
    mask2 = padding_mask(lengths, max_len=S + 4)[:, None, None, :]
    out2, alpha2 = mha(q, k2, v2, mask2, need_weights)
    torch.testing.assert_close(out2, out, atol=1e-12, rtol=0)
    if need_weights:
        assert (alpha2[..., S:] == 0).all()
        torch.testing.assert_close(alpha2[..., :S], alpha, atol=1e-12, rtol=0)


def test_kv_cache_cat_and_reorder():
    mha = MultiHeadAttention(8, 2).double()
    q, k, v = (x.detach() for x in _inputs(3, 2, 5, 8))
    kv = mha.project_kv(k, v)
    assert kv.k.shape == (3, 2, 5, 4) and kv.v.shape == (3, 2, 5, 4)
    # cat of two halves == projecting the whole (float64, atol 1e-12)
    halves = mha.project_kv(k[:, :2], v[:, :2]).cat(mha.project_kv(k[:, 2:], v[:, 2:]))
    torch.testing.assert_close(halves.k, kv.k, atol=1e-12, rtol=0)
    torch.testing.assert_close(halves.v, kv.v, atol=1e-12, rtol=0)
    # reorder(index) selects batch rows: attend(q[idx], kv.reorder(idx)) == attend(q, kv)[idx]
    index = torch.tensor([2, 0, 0, 1])
    re = kv.reorder(index)
    assert torch.equal(re.k, kv.k[index]) and torch.equal(re.v, kv.v[index])
    mask = padding_mask(torch.tensor([5, 1, 3]))[:, None, None, :]
    out, _ = mha.attend(q, kv, mask)
    out_re, _ = mha.attend(q[index], re, mask[index])
    torch.testing.assert_close(out_re, out[index], atol=1e-12, rtol=0)


# --- gradcheck (float64), both paths ------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "readable"])
def test_gradcheck(need_weights):
    mha = MultiHeadAttention(4, 2).double()
    names = [n for n, _ in mha.named_parameters()]
    q, k, v = _inputs(2, 3, 4, 4)
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    mask = mask[:, None, None, :]  # (B, 1, 1, S): batch row 1 fully masked

    def f(q, k, v, *ps):
        out, alpha = functional_call(mha, dict(zip(names, ps)), (q, k, v, mask, need_weights))
        return (out, alpha) if need_weights else out

    params = [p.detach().clone().requires_grad_() for p in mha.parameters()]
    assert torch.autograd.gradcheck(f, (q, k, v, *params), eps=1e-6, atol=1e-5)


# --- errors -------------------------------------------------------------------------------


def test_errors():
    with pytest.raises(ValueError, match="multiple of n_heads"):
        MultiHeadAttention(10, 3)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, x, x, mask=torch.ones(2, 3, dtype=torch.bool)[:, None, :, None].expand(2, 1, 3, 2))
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, x, x, mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        mha(x, x, x, mask=torch.ones(3, 3))


def test_reference_initialisation_matches_torch_in_proj():
    """W_q/W_k/W_v follow one Xavier draw over the stacked (3d × d) matrix, as
    ``nn.MultiheadAttention``'s in_proj: the same U(−a, a), a = √(6 / 4d) (the separate
    (d × d) draw would give twice the variance); W_o Xavier (d × d); biases zero."""
    d = 256
    torch.manual_seed(0)
    mha = MultiHeadAttention(d, 4)
    ref = nn.MultiheadAttention(d, 4)
    ref_var = ref.in_proj_weight.var().item()
    a = math.sqrt(6.0 / (4 * d))
    for W in (mha.W_q, mha.W_k, mha.W_v):
        assert W.weight.abs().max().item() <= a
        assert W.weight.var().item() == pytest.approx(a * a / 3, rel=0.05)
        assert W.weight.var().item() == pytest.approx(ref_var, rel=0.05)
        assert torch.count_nonzero(W.bias) == 0
    a_o = math.sqrt(6.0 / (2 * d))
    assert mha.W_o.weight.var().item() == pytest.approx(a_o * a_o / 3, rel=0.05)
    assert torch.count_nonzero(mha.W_o.bias) == 0
