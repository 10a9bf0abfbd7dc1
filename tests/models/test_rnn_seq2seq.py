"""The four registered RNN encoder–decoders (sutskever, cho, bahdanau, luong).

The shared model pattern (DESIGN §8) over every variant, plus the equations of each paper
against independent computations (torch.nn.LSTM / GRU references on unpadded sentences,
attention written out by hand). Equivalence tests run in float64 with atol 1e-10; the
teacher-forced ``forward`` of sutskever, cho and luong (input_feed=False) is the fused
kernel and ``step`` is the readable cell path, so "step == forward" (values and
gradients) is also the fused == readable proof for these models.
"""

import dataclasses

import pytest
import torch

import seqlab.models.bahdanau  # noqa: F401  (registers the four models)
import seqlab.models.cho  # noqa: F401
import seqlab.models.luong  # noqa: F401
import seqlab.models.sutskever  # noqa: F401
from seqlab.config import from_dict, to_dict
from seqlab.data.collate import collate_seq2seq
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy, repeat_rows
from seqlab.models.rnn_common import maxout
from seqlab.models.sutskever import reverse_padded
from seqlab.registry import MODELS
from seqlab.tasks.algorithmic import AlgorithmicConfig, make_examples
from seqlab.tasks.base import token_cross_entropy

V = 14
TOL = 1e-10  # atol, float64
SMALL = {
    "sutskever": {"emb_dim": 12, "hidden_size": 16, "layers": 2},
    "cho": {"emb_dim": 12, "hidden_size": 16, "readout_dim": 6},
    "bahdanau": {"emb_dim": 12, "hidden_size": 16, "attn_dim": 10, "readout_dim": 6},
    "luong": {"emb_dim": 12, "hidden_size": 16, "layers": 2},
}
VARIANTS = [
    ("sutskever", {}),
    ("sutskever", {"reverse_source": False, "layers": 1}),
    ("sutskever", {"tie_output": True, "emb_dim": 16}),
    ("cho", {}),
    ("cho", {"maxout": False, "layers": 2}),
    ("cho", {"reset_after": False, "tie_output": True, "readout_dim": 12, "init": "paper"}),
    ("bahdanau", {}),
    ("bahdanau", {"maxout": False, "encoder_layers": 2}),
    ("bahdanau", {"tie_output": True, "readout_dim": 12}),
    ("bahdanau", {"init": "paper"}),
    *[
        ("luong", {"score": score, "input_feed": feed})
        for score in ("dot", "general", "concat")
        for feed in (True, False)
    ],
    ("luong", {"bidirectional_encoder": True, "score": "dot"}),
    ("luong", {"bidirectional_encoder": True, "input_feed": False, "layers": 1}),
    ("luong", {"tie_output": True, "emb_dim": 16}),
]
ATTENTIONAL = [v for v in VARIANTS if v[0] in ("bahdanau", "luong")]


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: one intra-op thread is faster, and it keeps the file's time
    steady when other processes share the 2 cores (OpenMP threads spin when oversubscribed)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def ids(v):
    name, kw = v
    return name + "".join(f"-{k}={val}" for k, val in kw.items())


def build(name, dtype=torch.float64, dropout=0.3, **kw):
    entry = MODELS.get(name)
    cfg = entry.config_cls(**{**SMALL[name], "dropout": dropout, **kw})
    model = entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=PAD_ID).to(dtype)
    return model, cfg


def batch(n=6, seed=0, max_len=7):
    cfg = AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=max_len)
    return collate_seq2seq(make_examples(cfg, n, seed))


def stepped_logits(model, b):
    """Logits from encode → init_state → step over y_in (the decoding path)."""
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    steps = []
    for t in range(b.y_in.size(1)):
        logits, state = model.step(b.y_in[:, t], state)  # (B, V)
        steps.append(logits)
    return torch.stack(steps, dim=1)  # (B, T, V)


@pytest.mark.parametrize("variant", VARIANTS, ids=ids)
def test_shapes_gradients_and_rebuild(variant):
    name, kw = variant
    model, cfg = build(name, **kw)
    b = batch()
    with torch.no_grad():  # leave the zero inits (vₐ = 0 in bahdanau) so every path is live
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    logits = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
    assert logits.shape == (*b.y_in.shape, V)
    assert torch.isfinite(logits).all()
    token_cross_entropy(logits, b.y_out, PAD_ID).loss_sum.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"{pname} gets no gradient"
    rebuilt_cfg = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt_cfg == cfg
    clone = MODELS.get(name).target(rebuilt_cfg, src_vocab=V, tgt_vocab=V).double()
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(
        clone(b.src, b.src_mask, b.y_in, b.tgt_mask),
        model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize("variant", VARIANTS, ids=ids)
def test_step_equals_teacher_forcing_values_and_gradients(variant):
    """Cached step decoding == teacher-forced forward (atol 1e-10, float64), values and
    the gradients of every parameter."""
    name, kw = variant
    model, _ = build(name, **kw)
    model.eval()
    b = batch()
    grads = []
    for run in (
        lambda: model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        lambda: stepped_logits(model, b),
    ):
        model.zero_grad()
        logits = run()  # (B, T, V)
        token_cross_entropy(logits, b.y_out, PAD_ID).loss_sum.backward()
        grads.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, g_full), (steps, g_steps) = grads
    torch.testing.assert_close(steps, full, atol=TOL, rtol=0)
    for a, c in zip(g_steps, g_full):
        torch.testing.assert_close(a, c, atol=TOL, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS, ids=ids)
def test_padding_the_source_changes_nothing(variant):
    """Three extra source columns holding *random tokens* (masked out): same logits,
    atol 1e-10 (float64). The encoder honours lengths; attention ignores padding."""
    name, kw = variant
    model, _ = build(name, **kw)
    model.eval()
    b = batch()
    junk = torch.randint(4, V, (b.src.size(0), 3))
    src2 = torch.cat([b.src.masked_fill(~b.src_mask, 5), junk], 1)  # garbage in padding too
    mask2 = torch.cat([b.src_mask, torch.zeros_like(junk, dtype=torch.bool)], 1)
    with torch.no_grad():
        a = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        c = model(src2, mask2, b.y_in, b.tgt_mask)
    torch.testing.assert_close(a, c, atol=TOL, rtol=0)


@pytest.mark.parametrize("variant", ATTENTIONAL, ids=ids)
def test_attention_maps(variant):
    """α (B, T, S): exactly 0 on padded source positions, rows sum to 1 (atol 1e-12), and
    the same weights as the step-by-step decoder leaves in its state (atol 1e-10)."""
    name, kw = variant
    model, _ = build(name, **kw)
    model.eval()
    b = batch()
    alpha = model.attention_maps(b.src, b.src_mask, b.y_in, b.tgt_mask)["cross"]
    B, S = b.src.shape
    assert alpha.shape == (B, b.y_in.size(1), S)
    assert (alpha.masked_select(~b.src_mask[:, None, :]) == 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones_like(alpha[..., 0]), atol=1e-12, rtol=0)
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    with torch.no_grad():
        for t in range(b.y_in.size(1)):
            _, state = model.step(b.y_in[:, t], state)
            torch.testing.assert_close(state.alpha, alpha[:, t], atol=TOL, rtol=0)


@pytest.mark.parametrize(
    "variant", [v for v in VARIANTS if not v[1] or v[0] == "luong" and len(v[1]) == 2], ids=ids
)
def test_beam_search_through_seqlab_decode(variant):
    """Beam K=1 == greedy (same tokens, log P atol 1e-10); beam K=3 n_best=2: every
    hypothesis' log P equals teacher-forced forward's (atol 1e-10), so reordering the
    model's state dataclass in the search is right."""
    name, kw = variant
    model, _ = build(name, **kw)
    model.eval()
    b = batch(n=4)
    B = b.src.size(0)

    def state():
        return model.init_state(model.encode(b.src, b.src_mask), b.src_mask)

    g = greedy(model, state(), B, BOS_ID, EOS_ID, max_len=6, pad_id=PAD_ID)
    b1 = beam_search(model, state(), B, BOS_ID, EOS_ID, 6, beam_size=1, pad_id=PAD_ID)
    assert torch.equal(b1.tokens[:, 0], g.tokens)
    torch.testing.assert_close(b1.scores[:, 0], g.scores, atol=TOL, rtol=0)

    K, N = 3, 2
    r = beam_search(model, state(), B, BOS_ID, EOS_ID, 6, beam_size=K, n_best=N, pad_id=PAD_ID)
    tokens = r.tokens.flatten(0, 1)  # (B·N, T)
    inside = torch.arange(tokens.size(1)) < r.lengths.flatten()[:, None]  # (B·N, T)
    y = tokens.masked_fill(~inside, PAD_ID)  # (B·N, T)
    y_in = torch.cat([torch.full_like(y[:, :1], BOS_ID), y[:, :-1]], 1)  # (B·N, T)
    src, mask = repeat_rows((b.src, b.src_mask), B, N, y.device)
    with torch.no_grad():
        log_p = model(src, mask, y_in, inside).log_softmax(-1)  # (B·N, T, V)
    log_P = (log_p.gather(2, y[..., None]).squeeze(2) * inside).sum(1)  # (B·N,)
    torch.testing.assert_close(log_P.view(B, N), r.log_probs, atol=TOL, rtol=0)


@pytest.mark.parametrize(
    "name, kind, kw, ratio",
    [
        # Reversing the source turns the reverse task into a long-range one and the copy
        # task into a short-range one (Sutskever §3.3): test both ways round.
        ("sutskever", "reverse", {"reverse_source": False}, 0.3),
        ("sutskever", "copy", {"reverse_source": True}, 0.3),
        ("cho", "reverse", {"readout_dim": 32}, 0.35),
        ("bahdanau", "reverse", {"readout_dim": 32, "attn_dim": 32}, 0.1),
        ("luong", "reverse", {}, 0.1),
    ],
)
def test_learns_a_tiny_task(name, kind, kw, ratio):
    """120 Adam steps of 24 pairs (lengths 2–5, 10 symbols): the mean loss of the last 10
    steps falls below ``ratio`` × the first (attention models must nearly solve it)."""
    torch.manual_seed(0)
    model, _ = build(
        name, dtype=torch.float32, dropout=0.0, emb_dim=32, hidden_size=64, init_range=0.2, **kw
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    task = AlgorithmicConfig(kind=kind, n_symbols=V - 4, min_len=2, max_len=5)
    pairs = make_examples(task, 120 * 24, 1)
    losses = []
    for step in range(120):
        b = collate_seq2seq(pairs[step * 24 : step * 24 + 24])
        out = token_cross_entropy(model(b.src, b.src_mask, b.y_in, b.tgt_mask), b.y_out, 0)
        loss = out.loss_sum / out.n_tokens
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(loss.item())
    last = sum(losses[-10:]) / 10
    assert last < ratio * losses[0], (losses[0], last)


# --- the papers' equations against independent computations ------------------------------


def test_reverse_padded_keeps_padding_at_the_end():
    tokens = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0], [4, 5, 6, 7]])
    out = reverse_padded(tokens, torch.tensor([3, 2, 4]))
    assert out.tolist() == [[7, 6, 5, 0], [9, 8, 0, 0], [7, 6, 5, 4]]


def test_maxout_golden():
    t = torch.tensor([[1.0, 3.0, -2.0, -5.0, 0.5, 0.25]])
    assert maxout(t).tolist() == [[3.0, -2.0, 0.5]]


def test_sutskever_encoder_is_the_reversed_lstm():
    """Decoder initial state == final (h, c) of every layer of torch.nn.LSTM run on each
    reversed sentence alone (no padding), atol 1e-10."""
    model, _ = build("sutskever")
    model.eval()
    b = batch()
    ref = model.encoder.to_torch().eval()
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    for i, n in enumerate(b.src_lengths.tolist()):
        x = model.src_embed(b.src[i, :n].flip(0))[None]  # (1, n, E) reversed sentence
        _, (h, c) = ref(x)  # (L, 1, H)
        torch.testing.assert_close(state.h[i], h[:, 0], atol=TOL, rtol=0)
        torch.testing.assert_close(state.c[i], c[:, 0], atol=TOL, rtol=0)


def test_cho_summary_and_initial_state():
    """c = tanh(V h⟨N⟩) with h⟨N⟩ from torch.nn.GRU on the unpadded sentence, h′⟨0⟩ =
    tanh(V′ c), and c enters every decoder step: atol 1e-10."""
    model, _ = build("cho", dropout=0.0)
    model.eval()
    b = batch()
    ref = model.encoder.to_torch().eval()
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    for i, n in enumerate(b.src_lengths.tolist()):
        _, h_N = ref(model.src_embed(b.src[i, :n])[None])  # (1, 1, H)
        c = torch.tanh(h_N[0, 0] @ model.V.weight.T)  # (H,)
        torch.testing.assert_close(state.c[i], c, atol=TOL, rtol=0)
        torch.testing.assert_close(
            state.h[i, 0], torch.tanh(c @ model.V_prime.weight.T), atol=TOL, rtol=0
        )
    # Step t reads c: a different summary changes the logits of a later step.
    _, s1 = model.step(b.y_in[:, 0], state)
    other = dataclasses.replace(s1, c=s1.c.flip(0))
    assert not torch.allclose(model.step(b.y_in[:, 1], s1)[0], model.step(b.y_in[:, 1], other)[0])


def test_bahdanau_first_step_by_hand():
    """s_0 = tanh(W_s h←_1) with h←_1 from a bidirectional torch.nn.GRU on the unpadded
    sentence; e_1j = vₐᵀ tanh(Wₐ s_0 + Uₐ h_j), α = softmax over real j, c_1 = Σ α h_j,
    s_1 = GRU([E y_0; c_1], s_0) (the paper's reset-before GRU, written out): atol 1e-10."""
    model, _ = build("bahdanau", dropout=0.0)
    model.eval()
    b = batch()
    with torch.no_grad():
        for p in model.parameters():  # away from the paper init (vₐ = 0 gives uniform α)
            p.add_(0.3 * torch.randn_like(p))
    ref = model.encoder.to_torch().eval()
    n_dim = 16
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    _, s1 = model.step(b.y_in[:, 0], state)
    score, cell = model.attention.score, model.cell
    for i, n in enumerate(b.src_lengths.tolist()):
        h, _ = ref(model.src_embed(b.src[i, :n])[None])  # (1, n, 2n)
        h = h[0]  # (n, 2n)
        s0 = torch.tanh(model.W_s.weight @ h[0, n_dim:])  # (n,)
        torch.testing.assert_close(state.s[i], s0, atol=TOL, rtol=0)
        e = torch.tanh(score.W_a.weight @ s0 + h @ score.U_a.weight.T) @ score.v_a.weight[0]
        alpha = torch.softmax(e, 0)  # (n,)
        torch.testing.assert_close(s1.alpha[i, :n], alpha, atol=TOL, rtol=0)
        c = alpha @ h  # (2n,)
        x = torch.cat([model.tgt_embed(b.y_in[i, 0]), c])  # (m + 2n,)
        z = torch.sigmoid(cell.W_u @ torch.cat([s0, x]) + cell.b_u)  # update gate z_i
        r = torch.sigmoid(cell.W_r @ torch.cat([s0, x]) + cell.b_r)  # reset gate r_i
        s_tilde = torch.tanh(cell.W_c @ torch.cat([r * s0, x]) + cell.b_c)
        torch.testing.assert_close(s1.s[i], (1 - z) * s0 + z * s_tilde, atol=TOL, rtol=0)


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_luong_attentional_state_by_hand(score):
    """h̃_t = tanh(W_c [c_t; h_t]) with score(h_t, h̄_s) written out (eq. 8), and input
    feeding: the next step's first-layer input is [E y_t; h̃_t]. atol 1e-10."""
    model, _ = build("luong", score=score)
    model.eval()
    b = batch()
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    _, s1 = model.step(b.y_in[:, 0], state)
    h_t, h_bar = s1.h[:, -1], state.h_bar  # (B, H), (B, S, H)
    W = model.attention.score
    if score == "dot":
        e = torch.einsum("bh,bsh->bs", h_t, h_bar)
    elif score == "general":
        e = torch.einsum("bh,hk,bsk->bs", h_t, W.W_a.weight, h_bar)
    else:
        H = h_t.size(-1)
        pair = torch.cat([h_t[:, None].expand_as(h_bar), h_bar], -1)  # (B, S, 2H)
        e = torch.tanh(pair @ W.W_a.weight.T) @ W.v_a.weight[0]  # (B, S)
        assert W.W_a.weight.shape == (H, 2 * H)
    alpha = torch.softmax(e.masked_fill(~b.src_mask, float("-inf")), -1)  # (B, S)
    c_t = torch.einsum("bs,bsh->bh", alpha, h_bar)
    h_tilde = torch.tanh(torch.cat([c_t, h_t], -1) @ model.W_c.weight.T)
    torch.testing.assert_close(s1.h_tilde, h_tilde, atol=TOL, rtol=0)
    # Input feeding: the first decoder layer reads [E y_1; h̃_1].
    x = torch.cat([model.tgt_embed(b.y_in[:, 1]), h_tilde], -1)  # (B, E + H)
    (h, _), _ = model.decoder.cell_at(0, 0).step(x, (s1.h[:, 0], s1.c[:, 0]))
    _, s2 = model.step(b.y_in[:, 1], s1)
    torch.testing.assert_close(s2.h[:, 0], h, atol=TOL, rtol=0)


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="tie_output"):
        MODELS.get("sutskever").config_cls(emb_dim=8, hidden_size=16, tie_output=True)
    with pytest.raises(ValueError, match="tie_output"):
        MODELS.get("bahdanau").config_cls(emb_dim=8, readout_dim=16, tie_output=True)
    with pytest.raises(ValueError, match="even"):
        MODELS.get("luong").config_cls(hidden_size=15, bidirectional_encoder=True)
    with pytest.raises(ValueError, match="layers"):
        MODELS.get("cho").config_cls(layers=0)


def test_dropout_is_active_in_training_only():
    model, _ = build("luong", dropout=0.5)
    b = batch()
    model.train()
    a = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
    c = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
    assert not torch.allclose(a, c)
    model.eval()
    torch.testing.assert_close(
        model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize(
    "name, layers, tied",
    [("sutskever", "layers", "hidden_size"), ("cho", "layers", "readout_dim"),
     ("bahdanau", "encoder_layers", "readout_dim"), ("luong", "layers", "hidden_size")],
)  # fmt: skip
def test_bad_configs_are_rejected_with_the_field_name(name, layers, tied):
    from seqlab.registry import MODELS

    cls = MODELS.get(name).config_cls
    with pytest.raises(ValueError, match=f"{layers} must be >= 1"):
        cls(**{layers: 0})
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        cls(dropout=1.0)
    with pytest.raises(ValueError, match=f"tie_output needs {tied} == emb_dim"):
        cls(tie_output=True, emb_dim=8, **{tied: 16})


@pytest.mark.parametrize("name", ["luong", "sutskever"])
def test_forget_bias_option_sets_every_lstm_forget_gate_after_the_uniform_init(name):
    from seqlab.nn.cells import LSTMCell

    paper, _ = build(name, init_range=0.1)
    biased, _ = build(name, init_range=0.1, forget_bias=1.0)
    cells = [m for m in biased.modules() if isinstance(m, LSTMCell)]
    assert len(cells) >= 2  # encoder and decoder layers
    for cell in cells:
        assert torch.equal(cell.b_f, torch.ones_like(cell.b_f))
    for cell in (m for m in paper.modules() if isinstance(m, LSTMCell)):  # the paper: U(−r, r)
        assert cell.b_f.abs().max() <= 0.1 and cell.b_f.abs().max() > 0.0
    others = [p for n, p in biased.named_parameters() if not n.endswith("b_f")]
    assert max(float(p.detach().abs().max()) for p in others) <= 0.1


def test_luong_target_embedding_range_sets_the_tied_softmax_matrix_only():
    """tgt_embed_init_range r_y: the target embedding (= W_s, tied) ~ U(−r_y, r_y), its
    padding row zero; every other parameter still ~ U(−r, r); a bad range names the field."""
    kw = {"init_range": 0.1, "tie_output": True, "emb_dim": 64, "hidden_size": 64}
    model, _ = build("luong", tgt_embed_init_range=0.4, **kw)
    W = model.tgt_embed.weight.detach()
    assert model.W_out is None  # tied: W_s is the target embedding
    real = torch.cat([W[:PAD_ID], W[PAD_ID + 1 :]])
    assert 0.3 < float(real.abs().max()) <= 0.4 and float(W[PAD_ID].abs().max()) == 0.0
    others = [p for n, p in model.named_parameters() if n != "tgt_embed.weight"]
    assert max(float(p.detach().abs().max()) for p in others) <= 0.1
    with pytest.raises(ValueError, match="tgt_embed_init_range must be > 0"):
        MODELS.get("luong").config_cls(tgt_embed_init_range=0.0)
