"""The registered BiLSTM(-CRF) tagger: shapes, every parameter gets a gradient, rebuild from
its config, padding invariance (words and characters), constrained decoding, and it learns
a tiny synthetic tagging task."""

import pytest
import torch

import seqlab.models.tagger  # noqa: F401  (registers "bilstm_tagger")
from seqlab.config import from_dict, to_dict
from seqlab.data.collate import pad_batch
from seqlab.registry import MODELS

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
N_WORDS, N_CHARS = 24, 30
PER, LOC = set(range(4, 9)), set(range(9, 13))


def build(**kw):
    entry = MODELS.get("bilstm_tagger")
    base = dict(word_dim=16, char_dim=8, char_hidden=8, char_filters=8, hidden=16, dropout=0.0)
    cfg = entry.config_cls(**(base | kw))
    return entry.target(cfg, n_words=N_WORDS, n_chars=N_CHARS, tags=TAGS), cfg


def spelling(w):
    """A fixed character sequence per word id (length 1–4)."""
    return [4 + (w * 7 + j) % (N_CHARS - 4) for j in range(1 + w % 4)]


def tag_of(sentence):
    """Names → PER, places → LOC; a run of the same class is one entity (B- then I-)."""
    out, prev = [], None
    for w in sentence:
        kind = "PER" if w in PER else "LOC" if w in LOC else None
        out.append("O" if kind is None else ("I-" if kind == prev else "B-") + kind)
        prev = kind
    return [TAGS.index(t) for t in out]


def make_batch(n=8, seed=0, extra_T=0, extra_W=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 8, (n,), generator=g).tolist()
    sents = [torch.randint(4, N_WORDS, (m,), generator=g).tolist() for m in lengths]
    words, lens = pad_batch(sents)  # (B, T)
    T = words.shape[1] + extra_T
    words = torch.cat([words, torch.zeros(n, extra_T, dtype=torch.long)], 1)  # (B, T)
    mask = torch.arange(T)[None] < lens[:, None]  # (B, T)
    W = 4 + extra_W
    chars = torch.zeros(n, T, W, dtype=torch.long)  # (B, T, W)
    for b, s in enumerate(sents):
        for t, w in enumerate(s):
            sp = spelling(w)
            chars[b, t, : len(sp)] = torch.tensor(sp)
    tags, _ = pad_batch([tag_of(s) for s in sents])
    tags = torch.cat([tags, torch.zeros(n, extra_T, dtype=torch.long)], 1)
    return words, chars, mask, tags


VARIANTS = [
    {"char": "lstm", "decoder": "crf"},
    {"char": "cnn", "decoder": "crf", "constraint": "iob2"},
    {"char": "none", "decoder": "softmax"},
    {"char": "cnn", "decoder": "softmax", "constraint": "iob2", "cell": "gru", "num_layers": 2},
]


@pytest.mark.parametrize("kw", VARIANTS)
def test_shapes_gradients_and_rebuild(kw):
    model, cfg = build(**kw)
    words, chars, mask, tags = make_batch()
    P = model(words, chars, mask)
    assert P.shape == (*words.shape, len(TAGS))
    assert torch.isfinite(P).all()
    loss = model.loss(P, tags, mask)
    assert loss.shape == (words.shape[0],) and (loss > 0).all()
    loss.sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if name != "word_embed.weight":  # rows of unseen words stay zero
            assert p.grad.abs().sum() > 0, name
    rebuilt = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt == cfg
    clone = MODELS.get("bilstm_tagger").target(rebuilt, N_WORDS, N_CHARS, TAGS)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(words, chars, mask), model(words, chars, mask), atol=0, rtol=0)


@pytest.mark.parametrize("kw", VARIANTS)
def test_extra_padding_changes_nothing(kw):
    model, _ = build(**kw)
    model.eval()
    words, chars, mask, tags = make_batch(seed=1)
    words2, chars2, mask2, tags2 = make_batch(seed=1, extra_T=3, extra_W=5)
    T = words.shape[1]
    with torch.no_grad():
        P, P2 = model(words, chars, mask), model(words2, chars2, mask2)
        torch.testing.assert_close(P2[:, :T][mask], P[mask], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(
            model.loss(P2, tags2, mask2), model.loss(P, tags, mask), atol=1e-5, rtol=1e-6
        )
        assert torch.equal(model.decode(P2, mask2)[:, :T], model.decode(P, mask))
        assert (model.decode(P2, mask2)[:, T:] == 0).all()


def test_batched_equals_one_by_one():
    model, _ = build(char="lstm", decoder="crf")
    model.eval()
    words, chars, mask, _ = make_batch(n=5, seed=2)
    with torch.no_grad():
        P = model(words, chars, mask)
        for b in range(5):
            n = int(mask[b].sum())
            one = model(words[b : b + 1, :n], chars[b : b + 1, :n], mask[b : b + 1, :n])
            torch.testing.assert_close(one[0], P[b, :n], atol=1e-6, rtol=1e-6)


def test_constrained_softmax_decoding_is_valid_iob2():
    model, _ = build(char="none", decoder="softmax", constraint="iob2")
    words, chars, mask, _ = make_batch(n=16, seed=3)
    P = torch.randn(*words.shape, len(TAGS))
    P[..., [2, 4]] += 3.0  # push towards I- tags
    free = P.argmax(-1)
    out = model.decode(P, mask)
    n_invalid_free = 0
    for row, f, m in zip(out.tolist(), free.tolist(), mask.sum(1).tolist()):
        names = [TAGS[k] for k in row[:m]]
        prev = "O"
        for tag in names:
            assert not (tag.startswith("I-") and prev[2:] != tag[2:]), names
            prev = tag
        n_invalid_free += TAGS[f[0]].startswith("I-")
    assert n_invalid_free > 0  # argmax alone would start sentences with I- tags


def test_word_init_hook_and_errors():
    seen = {}

    def word_init(module):
        seen["shape"] = tuple(module.weight.shape)
        with torch.no_grad():
            module.weight[5].fill_(0.25)
        return 0.5

    entry = MODELS.get("bilstm_tagger")
    cfg = entry.config_cls(word_dim=8, char="none", hidden=8)
    model = entry.target(cfg, N_WORDS, N_CHARS, TAGS, word_init=word_init)
    assert seen["shape"] == (N_WORDS, 8) and model.coverage == 0.5
    assert torch.all(model.word_embed.weight[5] == 0.25)
    with pytest.raises(ValueError, match="char_width"):
        entry.config_cls(char_width=4)
    with pytest.raises(ValueError, match="label smoothing"):
        m, _ = build(decoder="crf")
        words, chars, mask, tags = make_batch()
        m.loss(m(words, chars, mask), tags, mask, label_smoothing=0.1)


@pytest.mark.parametrize("kw", [{"char": "lstm", "decoder": "crf"}, {"char": "cnn"}])
def test_learns_a_tiny_tagging_task(kw):
    torch.manual_seed(0)
    model, _ = build(**kw)
    words, chars, mask, tags = make_batch(n=64, seed=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    first = None
    for _ in range(60):
        loss = model.loss(model(words, chars, mask), tags, mask).sum() / mask.sum()
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    test_words, test_chars, test_mask, test_tags = make_batch(n=64, seed=5)
    with torch.no_grad():
        pred = model.decode(model(test_words, test_chars, test_mask), test_mask)
    accuracy = (pred == test_tags)[test_mask].float().mean()
    assert float(loss.detach()) < 0.1 * first
    assert accuracy > 0.97
