"""The registered sentence classifiers: shapes, gradients, config round trip, padding
invariance, batched == one at a time, learning a tiny separable set; Kim's
max-over-time against a hand loop, the max-norm constraint; the RNN's many-to-one
readout is the state after the last real token."""

import pytest
import torch
import torch.nn.functional as F

import seqlab.models.classifiers  # noqa: F401  (registers avg_embedding, rnn_classifier)
import seqlab.models.kim_cnn  # noqa: F401
import seqlab.models.nbsvm  # noqa: F401
import seqlab.models.transformer_classifier  # noqa: F401
from seqlab.config import from_dict, to_dict
from seqlab.data.collate import pad_batch
from seqlab.models.classifiers import masked_max, masked_mean
from seqlab.models.kim_cnn import max_over_time
from seqlab.nn.masks import padding_mask
from seqlab.registry import MODELS

V, C = 24, 3

SMALL = {
    "avg_embedding": {"d_embed": 8},
    "rnn_classifier": {"d_embed": 8, "hidden": 6, "dropout": 0.0},
    "kim_cnn": {"d_embed": 8, "widths": (2, 3), "n_maps": 4, "dropout": 0.0},
    "transformer_classifier": {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.0},
    "nbsvm": {"buckets": 97},
}

VARIANTS = [
    ("avg_embedding", {}),
    ("avg_embedding", {"hidden": 5}),
    ("avg_embedding", {"bigram_buckets": 97}),
    ("rnn_classifier", {"cell": "rnn"}),
    ("rnn_classifier", {"cell": "gru"}),
    ("rnn_classifier", {"cell": "lstm"}),
    ("rnn_classifier", {"cell": "lstm", "bidirectional": True}),
    ("rnn_classifier", {"cell": "gru", "bidirectional": True, "num_layers": 2}),
    ("rnn_classifier", {"cell": "lstm", "bidirectional": True, "pool": "max"}),
    ("rnn_classifier", {"cell": "lstm", "pool": "mean"}),
    ("kim_cnn", {}),
    ("kim_cnn", {"max_norm": None}),
    ("transformer_classifier", {}),
    ("transformer_classifier", {"pool": "cls", "norm_first": True}),
    ("transformer_classifier", {"positions": "learned"}),
    ("nbsvm", {}),
    ("nbsvm", {"ngram": 3}),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in VARIANTS]


def build(name, seed=0, **kw):
    torch.manual_seed(seed)
    entry = MODELS.get(name)
    cfg = entry.config_cls(**{**SMALL[name], **kw})
    model = entry.target(cfg, vocab=V, n_classes=C, pad_id=0)
    if name == "nbsvm":  # W starts at 0 (every logit equal): random weights, so tests can fail
        with torch.no_grad():
            model.W.normal_()
            model.r.uniform_(-2.0, 2.0)
    return model, cfg


def batch(lengths=(5, 1, 3, 7), seed=1):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(4, V, (n,), generator=g) for n in lengths]
    x, n = pad_batch(seqs, 0)  # (B, T), (B,)
    return x, padding_mask(n, x.shape[1]), seqs


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_shape_gradients_and_config_round_trip(name, kw):
    model, cfg = build(name, **kw)
    x, mask, _ = batch()
    logits = model(x, mask)
    assert logits.shape == (x.shape[0], C)
    assert torch.isfinite(logits).all()
    F.cross_entropy(logits, torch.tensor([0, 1, 2, 0])).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname
    again = from_dict(type(cfg), to_dict(cfg))
    assert again == cfg
    clone = MODELS.get(name).target(again, vocab=V, n_classes=C, pad_id=0)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(x, mask), model(x, mask), atol=0, rtol=0)


@pytest.mark.parametrize(("name", "kw"), VARIANTS, ids=IDS)
def test_padding_changes_nothing(name, kw):
    """Extra pad columns, and each sentence alone without padding: same logits (atol 1e-6)."""
    model, _ = build(name, **kw)
    model.eval()
    x, mask, seqs = batch()
    with torch.no_grad():
        ref = model(x, mask)  # (B, C)
        pad = torch.zeros(x.shape[0], 4, dtype=torch.long)
        wider = model(torch.cat([x, pad], 1), torch.cat([mask, pad.bool()], 1))
        torch.testing.assert_close(wider, ref, atol=1e-6, rtol=0)
        for b, s in enumerate(seqs):
            alone = model(s[None], torch.ones(1, len(s), dtype=torch.bool))  # (1, C)
            torch.testing.assert_close(alone[0], ref[b], atol=1e-6, rtol=0)


def separable_set(n=48, seed=0):
    """Class c sentences use only the words 4 + 6c … 9 + 6c (lengths 2–6)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % C
    seqs = [
        torch.randint(
            4 + 6 * int(c),
            10 + 6 * int(c),
            (int(torch.randint(2, 7, (1,), generator=g)),),
            generator=g,
        )
        for c in y
    ]
    x, lengths = pad_batch(seqs, 0)
    return x, padding_mask(lengths, x.shape[1]), y


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("avg_embedding", {}),
        ("rnn_classifier", {"cell": "lstm"}),
        ("rnn_classifier", {"cell": "lstm", "bidirectional": True}),
        ("kim_cnn", {}),
        ("transformer_classifier", {}),
        ("nbsvm", {}),
    ],
)
def test_learns_a_tiny_separable_set(name, kw):
    model, _ = build(name, **kw)
    x, mask, y = separable_set()
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(40):
        opt.zero_grad()
        F.cross_entropy(model(x, mask), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(x, mask).argmax(-1) == y).float().mean()
    assert acc == 1.0


def test_fasttext_bigram_average_equals_a_hand_sum():
    """h̄ = (Σ_t e⟨t⟩ + Σ_{t<T_b} G[(x⟨t⟩·P + x⟨t+1⟩) mod K]) / (2 T_b − 1), per row."""
    model, _ = build("avg_embedding", bigram_buckets=97)
    x, mask, seqs = batch()
    h = model.features(x, mask)  # (B, D)
    for b, s in enumerate(seqs):
        words = [model.embed.weight[int(i)] for i in s]
        pairs = [
            model.G.weight[(int(s[t]) * 1_000_003 + int(s[t + 1])) % 97] for t in range(len(s) - 1)
        ]
        want = torch.stack(words + pairs).sum(0) / (2 * len(s) - 1)
        torch.testing.assert_close(h[b], want, atol=1e-6, rtol=1e-6)


def test_kim_max_over_time_equals_a_hand_loop():
    """ĉ_j = max_i ReLU(Σ_τ w_j[τ]·x_{i+τ} + b_j) over the n + h − 1 windows of the
    sentence zero-padded by h − 1 on both sides: values and the gradients of the filters
    and the embeddings (atol 1e-6)."""
    model, cfg = build("kim_cnn", d_embed=3, widths=(2, 4), n_maps=2)
    x, mask, seqs = batch(lengths=(3, 1, 5))
    feats = model.features(x, mask)  # (B, 2·2)
    E = model.embed.weight
    expected = []
    for s in seqs:
        row = []
        for h, conv in zip(cfg.widths, model.convs):
            w, bias = conv.conv.weight, conv.conv.bias  # (maps, D, h), (maps,)
            zeros = torch.zeros(h - 1, 3)
            padded = torch.cat([zeros, E[s], zeros])  # (n + 2h − 2, D)
            for j in range(cfg.n_maps):
                best = None
                for i in range(len(s) + h - 1):
                    c_i = torch.relu((w[j] * padded[i : i + h].T).sum() + bias[j])
                    best = c_i if best is None else torch.maximum(best, c_i)
                row.append(best)
        expected.append(torch.stack(row))
    expected = torch.stack(expected)  # (B, 2·2)
    torch.testing.assert_close(feats, expected, atol=1e-6, rtol=0)
    weights = torch.randn_like(feats)
    params = [E, *(p for conv in model.convs for p in conv.parameters())]
    fast = torch.autograd.grad((feats * weights).sum(), params)
    slow = torch.autograd.grad((expected * weights).sum(), params)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_kim_max_norm_rescales_only_long_rows():
    model, cfg = build("kim_cnn", dropout=0.5, max_norm=3.0)
    limit = 3.0 * (1 - 0.5)  # ‖w_s‖ ≤ s on w_s = w / (1 − p)
    with torch.no_grad():
        model.W.weight.copy_(torch.randn_like(model.W.weight))
        model.W.weight[0] *= 10 / model.W.weight[0].norm()  # too long
        model.W.weight[1] *= 0.5 / model.W.weight[1].norm()  # short: untouched
    before = model.W.weight.detach().clone()
    x, mask, _ = batch()
    model.eval()
    model(x, mask)
    torch.testing.assert_close(model.W.weight, before, atol=0, rtol=0)  # eval writes nothing
    norms = model.output_weight().norm(dim=1)
    torch.testing.assert_close(norms[0], torch.tensor(limit), atol=1e-5, rtol=0)
    model.train()
    model(x, mask)
    norms = model.W.weight.norm(dim=1)
    torch.testing.assert_close(norms[0], torch.tensor(limit), atol=1e-5, rtol=0)
    torch.testing.assert_close(model.W.weight[1], before[1], atol=0, rtol=0)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_rnn_readout_is_the_state_after_the_last_real_token(bidirectional):
    """z = a⟨T_b⟩ (= the recurrent output at position T_b − 1); bidirectional:
    [→a⟨T_b⟩ ; ←a⟨1⟩] (atol 1e-6)."""
    model, cfg = build("rnn_classifier", cell="lstm", bidirectional=bidirectional)
    model.eval()
    x, mask, seqs = batch()
    with torch.no_grad():
        z = model.features(x, mask)  # (B, dirs·H)
        H = cfg.hidden
        for b, s in enumerate(seqs):
            out, _ = model.rnn(model.embed(s[None]))  # (1, T_b, dirs·H), no padding at all
            torch.testing.assert_close(z[b, :H], out[0, len(s) - 1, :H], atol=1e-6, rtol=0)
            if bidirectional:
                torch.testing.assert_close(z[b, H:], out[0, 0, H:], atol=1e-6, rtol=0)


def test_frozen_embeddings_and_embedding_init():
    calls = []

    def init(embed):
        calls.append(embed.weight.shape)
        with torch.no_grad():
            embed.weight[5] = 7.0

    entry = MODELS.get("kim_cnn")
    cfg = entry.config_cls(**SMALL["kim_cnn"], freeze_embeddings=True)
    model = entry.target(cfg, vocab=V, n_classes=C, pad_id=0, embedding_init=init)
    assert calls == [torch.Size([V, 8])]
    assert (model.embed.weight[5] == 7.0).all()
    assert not model.embed.weight.requires_grad
    x, mask, _ = batch()
    F.cross_entropy(model(x, mask), torch.tensor([0, 1, 2, 0])).backward()
    assert model.embed.weight.grad is None and model.convs[0].conv.weight.grad is not None


def test_pooling_gradcheck_float64():
    """masked mean / max and max-over-time: gradients against finite differences (float64,
    gradcheck's default eps 1e-6, atol 1e-5)."""
    torch.manual_seed(0)
    h = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([5, 2, 1]), 5)
    assert torch.autograd.gradcheck(lambda t: masked_mean(t, mask), (h,), atol=1e-5)
    assert torch.autograd.gradcheck(lambda t: masked_max(t, mask), (h,), atol=1e-5)
    n = torch.tensor([5, 2, 1])
    assert torch.autograd.gradcheck(lambda t: max_over_time(t, n), (h,), atol=1e-5)
    torch.testing.assert_close(max_over_time(h, n), masked_max(h, mask), atol=0, rtol=0)
