"""The pointer-generator with coverage (See, Liu & Manning 2017).

Hand-computed cases (eq. 9 mixture, eq. 12 coverage loss, eq. 11 attention), the
coverage of step t excluding step t, Σ P = 1 over the extended vocabulary, gradcheck of
the custom maths (float64), and the shared model pattern: every parameter gets a
gradient, rebuild from config, step == teacher forcing, padding changes nothing,
beam K = 1 == greedy, learns a copy task whose symbols are mostly target-OOV.
"""

import pytest
import torch

from seqlab.config import from_dict, to_dict
from seqlab.data.oov import collate_copy, make_copy_example
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab
from seqlab.decode import beam_search, greedy, repeat_rows
from seqlab.models.pointer_generator import (
    CoverageAttention,
    PointerGenerator,
    PointerGeneratorConfig,
    coverage_loss,
    final_distribution,
)
from seqlab.nn.attention import Attention
from seqlab.registry import MODELS

TOL = 1e-10  # atol for float64 path equivalences
V_SRC, V_TGT = 16, 10  # source symbols s0…s11, target vocabulary s0…s5 (+ 4 specials)
SMALL = {"emb_dim": 8, "hidden_size": 10, "attn_dim": 7, "out_dim": 9, "dropout": 0.0}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def vocabs():
    src = Vocab([f"s{i}" for i in range(V_SRC - 4)])
    tgt = Vocab([f"s{i}" for i in range(V_TGT - 4)])
    return src, tgt


def copy_batch(n=5, seed=0, min_len=2, max_len=6):
    """A copy task: target = source; symbols ≥ s6 are target-OOV (copied ids V + k)."""
    g = torch.Generator().manual_seed(seed)
    src_vocab, tgt_vocab = vocabs()
    examples = []
    for _ in range(n):
        L = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        words = [f"s{int(i)}" for i in torch.randint(0, V_SRC - 4, (L,), generator=g)]
        examples.append(make_copy_example(words, words, src_vocab, tgt_vocab))
    return collate_copy(examples)


def build(coverage=True, dtype=torch.float64, **kw):
    cfg = PointerGeneratorConfig(**{**SMALL, "coverage": coverage, **kw})
    model = PointerGenerator(cfg, src_vocab=V_SRC, tgt_vocab=V_TGT, pad_id=PAD_ID).to(dtype)
    return model.eval(), cfg


def run(model, b, **kw):
    return model(b.src, b.src_mask, b.y_in, b.tgt_mask, b.src_ext, b.n_oov, **kw)


def stepped(model, b):
    """log P from encode → init_state → step over y_in, and the states after each step."""
    state = model.init_state(model.encode(b.src, b.src_mask, b.src_ext, b.n_oov), b.src_mask)
    outs, states = [], []
    for t in range(b.y_in.size(1)):
        log_p, state = model.step(b.y_in[:, t], state)  # (B, V + n_oov)
        outs.append(log_p)
        states.append(state)
    return torch.stack(outs, dim=1), states  # (B, T, V + n_oov)


def nll(log_p, b):
    return -(log_p.gather(-1, b.y_out[..., None]).squeeze(-1) * b.tgt_mask).sum()


# ----------------------------------------------------------------- the equations by hand


def test_final_distribution_hand_built_oov_gets_one_minus_p_gen_attention():
    """V = 6, source ext ids [4, 6, 7, 6, 3]: OOV #0 (id 6) at two positions, OOV #1
    (id 7), in-vocabulary word 4, EOS 3. p_gen = 0.6. Exact values (atol 1e-15)."""
    P_vocab = torch.tensor([[0.05, 0.05, 0.1, 0.2, 0.3, 0.3]], dtype=torch.float64)
    a = torch.tensor([[0.1, 0.2, 0.3, 0.15, 0.25]], dtype=torch.float64)
    p_gen = torch.tensor([0.6], dtype=torch.float64)
    src_ext = torch.tensor([[4, 6, 7, 6, 3]])
    P = final_distribution(P_vocab, a, p_gen, src_ext, n_oov=2)
    expected = [0.03, 0.03, 0.06, 0.12 + 0.4 * 0.25, 0.18 + 0.4 * 0.1, 0.18, 0.4 * 0.35, 0.4 * 0.3]
    torch.testing.assert_close(
        P[0], torch.tensor(expected, dtype=torch.float64), atol=1e-15, rtol=0
    )
    assert P[0, 6] == pytest.approx((1 - 0.6) * (0.2 + 0.15), abs=1e-15)  # (1 − p_gen)·Σ a_i
    torch.testing.assert_close(P.sum(), torch.tensor(1.0, dtype=torch.float64), atol=1e-15, rtol=0)


def test_model_puts_exactly_one_minus_p_gen_attention_on_oov_ids():
    """Through the model: log P of each OOV id = log((1 − p_gen)·Σ_{i: w_i = id} a_i) with
    the step's own p_gen and a (atol 1e-12, float64); ids beyond a row's OOVs get ~0."""
    model, _ = build()
    b = copy_batch(n=4, seed=0)  # rows have 1, 0, 3, 1 OOVs: n_oov = 3
    assert b.n_oov == 3 and (b.src_ext == V_TGT + 1).sum() > 0
    with torch.no_grad():
        log_p, states = stepped(model, b)
    n_row = torch.tensor([len(o) for o in b.oovs])  # (B,)
    floor = torch.tensor(torch.finfo(torch.float64).tiny, dtype=torch.float64).log()  # −708
    for t, st in enumerate(states):
        for k in range(b.n_oov):
            ext = V_TGT + k
            mass = ((b.src_ext == ext) * st.a).sum(1)  # (B,)  Σ_{i: w_i = ext} a_i
            expected = (1 - st.p_gen) * mass  # (B,)
            got = log_p[:, t, ext].exp()
            torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
            beyond = k >= n_row  # (B,) rows without an OOV number k
            assert (log_p[beyond, t, ext] == floor).all()  # probability 0, floored
            assert (log_p[~beyond, t, ext] > floor + 100).all()


def test_coverage_loss_hand_computed():
    """a⁰ = (.5 .3 .2), a¹ = (.2 .2 .6), a² = (.1 .6 .3): c⁰ = 0, c¹ = a⁰, c² = a⁰ + a¹
    = (.7 .5 .8); covloss = 0, .2+.2+.2 = .6, .1+.5+.3 = .9 (atol 1e-15)."""
    a = torch.tensor([[[0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.1, 0.6, 0.3]]], dtype=torch.float64)
    c = torch.cat([torch.zeros_like(a[:, :1]), a.cumsum(1)[:, :-1]], dim=1)  # Σ_{t'<t}
    loss = coverage_loss(a, c)
    torch.testing.assert_close(
        loss, torch.tensor([[0.0, 0.6, 0.9]], dtype=torch.float64), atol=1e-15, rtol=0
    )
    # the peer bug (current step included) makes every step's loss the constant Σ a = 1
    buggy = coverage_loss(a, c + a)
    torch.testing.assert_close(buggy, torch.ones_like(buggy), atol=1e-15, rtol=0)


@pytest.mark.parametrize("coverage", [True, False])
def test_model_coverage_excludes_the_current_step(coverage):
    """c^t = Σ_{t'<t} a^{t'} exactly (atol 1e-12): c⁰ = 0, and covloss_t = Σ_i min(a_i^t,
    c_i^t) recomputed by hand from the model's own attention; covloss_0 = 0 (the bug
    would give 1)."""
    model, _ = build(coverage=coverage)
    with torch.no_grad():  # sharp attention, so that min(a^t, c^t) < a^t somewhere
        for p in model.attention.parameters():
            p.normal_(0.0, 1.0)
    b = copy_batch(seed=1)
    out = run(model, b, details=True)
    a, c = out.attention, out.coverage  # (B, T, S)
    assert (c[:, 0] == 0).all() and (out.cov_loss[:, 0] == 0).all()
    for t in range(a.size(1)):
        torch.testing.assert_close(c[:, t], a[:, :t].sum(1), atol=1e-12, rtol=0)
        hand = torch.tensor(
            [
                sum(min(x, y) for x, y in zip(a[i, t].tolist(), c[i, t].tolist()))
                for i in range(a.size(0))
            ],
            dtype=torch.float64,
        )
        torch.testing.assert_close(out.cov_loss[:, t], hand, atol=1e-12, rtol=0)
    assert (out.cov_loss[:, 1:] < 1 - 1e-6).any()


def test_coverage_attention_is_equation_11_by_hand():
    """e_i = vᵀ tanh(W_h h_i + W_s s + w_c c_i + b_attn) over i by explicit loops, masked
    softmax, h* = Σ a_i h_i (atol 1e-12, float64)."""
    torch.manual_seed(0)
    layer = CoverageAttention(query_dim=3, key_dim=4, attn_dim=5, coverage=True).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_()
    s = torch.randn(2, 3, dtype=torch.float64)
    h = torch.randn(2, 4, 4, dtype=torch.float64)
    cov = torch.rand(2, 4, dtype=torch.float64)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    h_star, a = layer(s, layer.precompute_keys(h), h, mask, cov)
    W_h, W_s = layer.score.U_a.weight.detach(), layer.score.W_a.weight.detach()
    v = layer.score.v_a.weight[0].detach()
    w_c, b_attn = layer.w_c.detach(), layer.b_attn.detach()
    for b in range(2):
        n = int(mask[b].sum())
        e = [
            float(v @ torch.tanh(W_h @ h[b, i] + W_s @ s[b] + w_c * cov[b, i] + b_attn))
            for i in range(n)
        ]
        alpha = torch.softmax(torch.tensor(e, dtype=torch.float64), 0)
        torch.testing.assert_close(a[b, :n], alpha, atol=1e-12, rtol=0)
        assert (a[b, n:] == 0).all()
        torch.testing.assert_close(h_star[b], alpha @ h[b, :n], atol=1e-12, rtol=0)


def test_without_coverage_the_attention_is_bahdanau_additive():
    """coverage=False, b_attn = 0: the same context and weights as seqlab.nn.attention's
    Attention(score="additive") with copied W_a, U_a, v_a (values and gradients, atol 1e-12)."""
    torch.manual_seed(1)
    ours = CoverageAttention(3, 4, 5, coverage=False).double()
    ref = Attention(3, 4, score="additive", attn_dim=5).double()
    ref.score.load_state_dict(ours.score.state_dict())
    s = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 6, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    got = ours(s, ours.precompute_keys(h), h, mask, torch.rand(2, 6, dtype=torch.float64))
    want = ref(s, h, mask=mask)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=0)
    g1 = torch.autograd.grad(got[0].sum() + got[1].pow(2).sum(), (s, h))
    g2 = torch.autograd.grad(want[0].sum() + want[1].pow(2).sum(), (s, h))
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=0)


def test_gradcheck_mixture_coverage_loss_and_attention():
    """torch.autograd.gradcheck (float64, eps 1e-6, atol 1e-5) of eq. 9, eq. 12 (no ties)
    and eq. 11 with respect to every input that is a float."""
    torch.manual_seed(2)
    P_vocab = torch.softmax(torch.randn(2, 3, 6, dtype=torch.float64), -1).requires_grad_()
    a = torch.softmax(torch.randn(2, 3, 4, dtype=torch.float64), -1).requires_grad_()
    p_gen = torch.rand(2, 3, dtype=torch.float64).requires_grad_()
    src_ext = torch.tensor([[4, 6, 6, 3], [7, 5, 6, 3]])
    assert torch.autograd.gradcheck(
        lambda P, x, g: final_distribution(P, x, g, src_ext, 2), (P_vocab, a, p_gen)
    )
    cov = (a.detach() + torch.linspace(-0.3, 0.3, 4, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(coverage_loss, (a, cov))
    layer = CoverageAttention(3, 4, 5, coverage=True).double()
    with torch.no_grad():
        layer.w_c.normal_()
    s = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    c = torch.rand(2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    assert torch.autograd.gradcheck(
        lambda s, h, c: layer(s, layer.precompute_keys(h), h, mask, c), (s, h, c)
    )


# ----------------------------------------------------------------- the model contract


@pytest.mark.parametrize("coverage", [True, False])
def test_distribution_sums_to_one_over_the_extended_vocabulary(coverage):
    """float32: Σ_w exp(log P(w)) = 1 over V + n_oov at every step (atol 1e-6)."""
    model, _ = build(coverage, dtype=torch.float32)
    b = copy_batch(n=6, seed=4)
    log_p = run(model, b)
    assert log_p.shape == (*b.y_in.shape, V_TGT + b.n_oov) and b.n_oov > 0
    total = log_p.exp().sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total), atol=1e-6, rtol=0)


def test_bf16_autocast_keeps_the_mixture_and_coverage_in_float32():
    """Under CPU bf16 autocast (what precision=auto picks on AMX CPUs) a^t, c^t, p_gen and
    log P are float32 and Σ P = 1 (atol 1e-5)."""
    model, _ = build(dtype=torch.float32)
    b = copy_batch(n=6, seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = run(model, b, details=True)
    for x in out:
        assert x.dtype == torch.float32
    total = out.log_probs.exp().sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total), atol=1e-5, rtol=0)


@pytest.mark.parametrize("coverage", [True, False])
def test_every_parameter_gets_a_gradient_and_rebuilds_from_config(coverage):
    model, cfg = build(coverage, dropout=0.2, selective_read=coverage)
    model.train()
    b = copy_batch()
    out = run(model, b, details=True)
    assert torch.isfinite(out.log_probs).all()
    (nll(out.log_probs, b) + (out.cov_loss * b.tgt_mask).sum()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"
    assert (model.attention.w_c is not None) == coverage
    assert (model.W_zeta is not None) == coverage
    rebuilt = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt == cfg
    clone = MODELS.get("pointer_generator").target(rebuilt, V_SRC, V_TGT).double()
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(run(clone, b), run(model, b), atol=0, rtol=0)


@pytest.mark.parametrize("coverage", [True, False])
@pytest.mark.parametrize("selective", [False, True])
def test_step_equals_teacher_forcing_values_and_gradients(coverage, selective):
    """Step decoding (LSTM cell, one step at a time) == teacher-forced forward (fused LSTM
    over all T): log P and every parameter's gradient, atol 1e-10 (float64); y_in holds
    copied OOV ids ≥ V, read as UNK by both (and through the selective read ζ)."""
    model, _ = build(coverage, selective_read=selective)
    b = copy_batch(seed=5)
    assert (b.y_in >= V_TGT).any()
    results = []
    for fn in (lambda: run(model, b), lambda: stepped(model, b)[0]):
        model.zero_grad()
        log_p = fn()
        nll(log_p, b).backward()
        results.append((log_p.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, g_full), (steps, g_steps) = results
    torch.testing.assert_close(steps, full, atol=TOL, rtol=0)
    for x, y in zip(g_steps, g_full):
        torch.testing.assert_close(x, y, atol=TOL, rtol=0)


@pytest.mark.parametrize("selective", [False, True])
def test_padding_the_source_changes_nothing(selective):
    """Three extra masked source columns with random source ids and random extended ids:
    the same log P (atol 1e-10, float64); the padded ids also match decoder inputs, which
    the selective read must ignore."""
    model, _ = build(selective_read=selective)
    b = copy_batch(seed=6)
    B = b.src.size(0)
    junk = torch.randint(4, V_SRC, (B, 3))
    junk_ext = b.y_in[:, 1:4].clone()  # ids the decoder reads: a masked match reads nothing
    src2 = torch.cat([b.src.masked_fill(~b.src_mask, 5), junk], 1)
    ext2 = torch.cat([b.src_ext.masked_fill(~b.src_mask, 7), junk_ext], 1)
    mask2 = torch.cat([b.src_mask, torch.zeros(B, 3, dtype=torch.bool)], 1)
    with torch.no_grad():
        x = run(model, b)
        y = model(src2, mask2, b.y_in, b.tgt_mask, ext2, b.n_oov)
    torch.testing.assert_close(x, y, atol=TOL, rtol=0)


@pytest.mark.parametrize("selective", [False, True])
def test_beam_one_equals_greedy_and_beam_scores_match_teacher_forcing(selective):
    """Beam K=1 == greedy (tokens equal, log P atol 1e-10); K=3, n_best 2: each
    hypothesis' log P (over the extended vocabulary, OOV ids included) equals the
    teacher-forced one (atol 1e-10), so the state (n_oov, coverage) is reordered right."""
    model, _ = build(selective_read=selective)
    b = copy_batch(n=4, seed=7)
    B = b.src.size(0)

    def state():
        return model.init_state(model.encode(b.src, b.src_mask, b.src_ext, b.n_oov), b.src_mask)

    g = greedy(model, state(), B, BOS_ID, EOS_ID, max_len=6, pad_id=PAD_ID)
    b1 = beam_search(model, state(), B, BOS_ID, EOS_ID, 6, beam_size=1, pad_id=PAD_ID)
    assert torch.equal(b1.tokens[:, 0], g.tokens)
    torch.testing.assert_close(b1.scores[:, 0], g.scores, atol=TOL, rtol=0)
    K, N = 3, 2
    r = beam_search(model, state(), B, BOS_ID, EOS_ID, 6, beam_size=K, n_best=N, pad_id=PAD_ID)
    log_P, _, _ = teacher_forced_hypotheses(model, b, r)
    torch.testing.assert_close(log_P.view(B, N), r.log_probs, atol=TOL, rtol=0)


def teacher_forced_hypotheses(model, b, r):
    """The model teacher-forced on every n-best hypothesis of beam result ``r`` over batch
    ``b``: log P of each (B·N,), the ``PointerGeneratorOutput`` and the mask of the
    hypothesis' steps (B·N, T), EOS included."""
    B, N = r.tokens.shape[:2]
    tokens = r.tokens.flatten(0, 1)  # (B·N, T)
    inside = torch.arange(tokens.size(1)) < r.lengths.flatten()[:, None]  # (B·N, T)
    y = tokens.masked_fill(~inside, PAD_ID)  # (B·N, T)
    y_in = torch.cat([torch.full_like(y[:, :1], BOS_ID), y[:, :-1]], 1)  # (B·N, T)
    src, mask, ext = repeat_rows((b.src, b.src_mask, b.src_ext), B, N, y.device)
    with torch.no_grad():
        out = model(src, mask, y_in, inside, ext, b.n_oov, details=True)
    log_p = out.log_probs.log_softmax(-1)  # (B·N, T, V')
    log_P = (log_p.gather(2, y[..., None]).squeeze(2) * inside).sum(1)  # (B·N,)
    return log_P, out, inside


def test_learns_to_copy_target_oov_symbols():
    """Copy task where half the symbols are outside the target vocabulary: 150 Adam steps
    (batch 32, lengths 2–6); greedy decoding of 50 held-out sentences then reproduces
    ≥ 90% of the sentences exactly, OOV symbols included (only copying can produce them)."""
    torch.manual_seed(0)
    model, _ = build(dtype=torch.float32, emb_dim=32, hidden_size=48, attn_dim=32, out_dim=32)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(150):
        b = copy_batch(n=32, seed=100 + step)
        out = run(model, b, details=True)
        loss = (nll(out.log_probs, b) + (out.cov_loss * b.tgt_mask).sum()) / b.n_tokens
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
    model.eval()
    b = copy_batch(n=50, seed=99)
    state = model.init_state(model.encode(b.src, b.src_mask, b.src_ext, b.n_oov), b.src_mask)
    res = greedy(model, state, 50, BOS_ID, EOS_ID, max_len=8, pad_id=PAD_ID)
    T = min(res.tokens.size(1), b.y_out.size(1))
    want = b.y_out[:, :T].masked_fill(~b.tgt_mask[:, :T], PAD_ID)
    exact = (res.tokens[:, :T] == want).all(1) & (res.lengths == b.tgt_mask.sum(1))
    assert (b.y_out >= V_TGT).any()
    assert exact.float().mean() >= 0.9, exact.float().mean()


def test_gram_mean_readable_equals_embedding_bag_values_and_gradients():
    # the fused nn.EmbeddingBag(mean, padding_idx=0) and the masked mean that ONNX exports
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=6, hidden_size=4, attn_dim=4, out_dim=4, dropout=0.0)
    model = PointerGenerator(cfg, src_vocab=V_SRC, tgt_vocab=V_TGT, src_gram_buckets=9)
    grams = torch.tensor([[[3, 9, 0, 0], [0, 0, 0, 0]], [[1, 1, 2, 5], [4, 0, 7, 0]]])
    out = {}
    for fused in (True, False):
        model.fused_gram_mean = fused
        model.zero_grad()
        z = model.gram_mean(grams)  # (2, 2, 6)
        (z * torch.arange(z.numel()).view_as(z)).sum().backward()
        out[fused] = z.detach(), model.src_gram_embed.weight.grad.clone()
    torch.testing.assert_close(out[False][0], out[True][0])
    torch.testing.assert_close(out[False][1], out[True][1])
    assert bool((out[False][0][0, 1] == 0).all())  # a word without n-grams adds 0
    w = model.src_gram_embed.weight.detach()
    torch.testing.assert_close(out[False][0][1, 1], (w[4] + w[7]) / 2)  # id 0 not counted
