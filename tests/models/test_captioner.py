"""Show, Attend and Tell (``show_attend_tell``): attention weights on the simplex, the
doubly stochastic term by hand, cached step == teacher forcing (float64, atol 1e-10),
beam K=1 == greedy, gradients everywhere, rebuild from config, overfitting a few scenes."""

import dataclasses

import pytest
import torch

import seqlab.models.captioner  # noqa: F401  (registers show_attend_tell)
from seqlab.config import from_dict, to_dict
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy
from seqlab.models.captioner import (
    RegionEncoder,
    ShowAttendTell,
    ShowAttendTellConfig,
    doubly_stochastic_penalty,
    region_centres,
)
from seqlab.registry import MODELS
from seqlab.tasks.base import token_cross_entropy

V = 18
TINY = {"channels": (4, 6, 8), "kernels": (3, 3, 3), "emb_dim": 6, "hidden_size": 10, "attn_dim": 7}
TOL = 1e-10  # atol, float64
VARIANTS = [{}, {"selector": False}, {"positions": False}]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def build(dtype=torch.float64, image_size=32, **kw):
    cfg = ShowAttendTellConfig(**{**TINY, "dropout": 0.3, **kw})
    model = ShowAttendTell(cfg, tgt_vocab=V, pad_id=PAD_ID, image_size=image_size).to(dtype)
    return model, cfg


def data(B=3, T=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    images = torch.rand(B, 3, 32, 32, generator=g, dtype=dtype)  # (B, 3, 32, 32)
    y_in = torch.randint(4, V, (B, T), generator=g)  # (B, T)
    y_in[:, 0] = BOS_ID
    lengths = torch.tensor([T, T - 2, T - 3])[:B]
    tgt_mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    y_in = y_in.masked_fill(~tgt_mask, PAD_ID)
    y_out = torch.roll(y_in, -1, dims=1).masked_fill(~tgt_mask, PAD_ID)
    return images, y_in, y_out, tgt_mask


def test_registered_and_grid():
    assert MODELS.get("show_attend_tell").target is ShowAttendTell
    model, _ = build()
    assert model.grid == (4, 4)  # 32 / (2 · 2²)
    images, y_in, _, tgt_mask = data()
    a = model.encode(images)
    assert a.shape == (3, 16, 8)  # (B, L, D)


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_attention_weights_sum_to_one_over_regions(kw):
    model, _ = build(**kw)
    model.eval()
    images, y_in, _, tgt_mask = data()
    logits, alpha, beta = model(images, None, y_in, tgt_mask, return_attention=True)
    assert logits.shape == (3, 6, V) and alpha.shape == (3, 6, 16) and beta.shape == (3, 6)
    assert torch.isfinite(logits).all()
    assert (alpha >= 0).all()
    torch.testing.assert_close(
        alpha.sum(-1), torch.ones(3, 6, dtype=alpha.dtype), atol=1e-12, rtol=0
    )
    if kw.get("selector", True):
        assert ((beta > 0) & (beta < 1)).all()
    else:
        assert (beta == 1).all()
    maps = model.attention_maps(images, None, y_in, tgt_mask)
    torch.testing.assert_close(maps["alpha"], alpha, atol=0, rtol=0)


def test_doubly_stochastic_penalty_by_hand():
    alpha = torch.tensor(
        [
            [[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]],  # third step is padding
            [[0.5, 0.5], [0.5, 0.5], [0.0, 1.0]],
        ]
    )  # (B=2, T=3, L=2)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    # image 0: Σ_t α = (1.5, 0.5) → (1 − 1.5)² + (1 − 0.5)² = 0.5
    # image 1: Σ_t α = (1.0, 2.0) → 0 + 1 = 1
    penalty = doubly_stochastic_penalty(alpha, mask)
    torch.testing.assert_close(penalty, torch.tensor([0.5, 1.0]), atol=1e-7, rtol=0)


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_cached_step_equals_teacher_forcing(kw):
    """Decoding word by word through ``step`` (the search path) gives the teacher-forced
    logits, α_t and β_t of every position (float64, atol 1e-10)."""
    model, _ = build(**kw)
    model.eval()
    images, y_in, _, tgt_mask = data()
    logits, alpha, beta = model(images, None, y_in, tgt_mask, return_attention=True)
    state = model.init_state(model.encode(images, None), None)
    for t in range(y_in.shape[1]):
        step_logits, state = model.step(y_in[:, t], state)
        torch.testing.assert_close(step_logits, logits[:, t], atol=TOL, rtol=0)
        torch.testing.assert_close(state.alpha, alpha[:, t], atol=TOL, rtol=0)
        torch.testing.assert_close(state.beta[:, 0], beta[:, t], atol=TOL, rtol=0)


def test_later_words_do_not_change_earlier_logits():
    model, _ = build()
    model.eval()
    images, y_in, _, tgt_mask = data()
    changed = y_in.clone()
    changed[:, 3:] = 5
    a = model(images, None, y_in, tgt_mask)
    b = model(images, None, changed, tgt_mask)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=0, rtol=0)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_beam_of_one_is_greedy():
    model, _ = build(dtype=torch.float32)
    model.eval()
    images = data(dtype=torch.float32)[0]
    state = model.init_state(model.encode(images, None), None)
    g = greedy(model, state, 3, BOS_ID, EOS_ID, max_len=9)
    b = beam_search(model, state, 3, BOS_ID, EOS_ID, max_len=9, beam_size=1)
    tokens = b.tokens[:, 0] if b.tokens.dim() == 3 else b.tokens
    assert torch.equal(tokens, g.tokens)
    torch.testing.assert_close(b.log_probs.reshape(-1), g.log_probs, atol=1e-5, rtol=0)


def test_every_parameter_gets_a_gradient():
    model, _ = build(dtype=torch.float32)
    model.train()
    images, y_in, y_out, tgt_mask = data(dtype=torch.float32)
    logits, alpha, _ = model(images, None, y_in, tgt_mask, return_attention=True)
    loss = token_cross_entropy(logits, y_out, PAD_ID).loss_sum
    loss = loss + doubly_stochastic_penalty(alpha, tgt_mask).sum()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_rebuilds_from_saved_config():
    model, cfg = build()
    model.eval()
    again = ShowAttendTell(from_dict(ShowAttendTellConfig, to_dict(cfg)), V, PAD_ID, 3, 32)
    again = again.to(torch.float64)
    again.load_state_dict(model.state_dict())
    again.eval()
    images, y_in, _, tgt_mask = data()
    assert to_dict(cfg)["channels"] == [4, 6, 8]
    torch.testing.assert_close(
        again(images, None, y_in, tgt_mask), model(images, None, y_in, tgt_mask), atol=0, rtol=0
    )


def test_regions_are_the_last_feature_map_row_major():
    """a_{r·w + c} is cell (r, c) of the last map, and region_centres puts it at pixel
    ((c + ½)·W/w, (r + ½)·H/h)."""
    enc = RegionEncoder(3, (4, 5), kernels=(3, 3), stem_stride=2).double()
    x = torch.rand(2, 3, 16, 16, dtype=torch.float64)
    h = torch.relu(enc.convs[0](x))  # (2, 4, 8, 8)
    h = torch.relu(enc.convs[1](torch.nn.functional.max_pool2d(h, 2)))  # (2, 5, 4, 4)
    a = enc(x)  # (2, 16, 5)
    for r, c in [(0, 0), (0, 3), (2, 1), (3, 3)]:
        torch.testing.assert_close(a[:, r * 4 + c], h[:, :, r, c], atol=0, rtol=0)
    centres = region_centres((2, 2), (8, 8))
    expected = torch.tensor([[2.0, 2.0], [6.0, 2.0], [2.0, 6.0], [6.0, 6.0]], dtype=torch.float64)
    torch.testing.assert_close(centres, expected, atol=0, rtol=0)


def test_config_errors():
    with pytest.raises(ValueError, match="dropout"):
        ShowAttendTellConfig(dropout=1.0)
    with pytest.raises(ValueError, match="kernels must be odd"):
        ShowAttendTellConfig(kernels=(5, 4, 1))
    with pytest.raises(ValueError, match="one per conv layer"):
        ShowAttendTellConfig(kernels=(5, 3))
    with pytest.raises(ValueError, match="multiple of 8"):
        ShowAttendTell(ShowAttendTellConfig(**TINY), V, PAD_ID, 3, image_size=36)


def test_overfits_a_handful_of_scenes():
    """Four scenes, a few hundred Adam steps: greedy decoding reproduces every caption."""
    from seqlab.tasks.captioning import CaptionConfig, CaptionTask

    cfg = CaptionConfig(n_train=4, canvas=32, min_size=8, max_size=10, min_objects=2, max_objects=2)
    task = CaptionTask(cfg)
    task.prepare()
    torch.manual_seed(0)
    model_cfg = ShowAttendTellConfig(
        channels=(8, 16, 16),
        kernels=(3, 3, 1),
        emb_dim=16,
        hidden_size=32,
        attn_dim=16,
        dropout=0.0,
    )
    model = ShowAttendTell(model_cfg, **task.model_kwargs())
    batch = task.collate([0, 1, 2, 3], "train")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        out = task.loss(model, batch)
        opt.zero_grad()
        (out.loss_sum / out.n_tokens).backward()
        opt.step()
    assert float(out.nll_sum) / out.n_tokens < 0.05
    described = task.describe(model, "train", [0, 1, 2, 3])
    assert [" ".join(d.words) for d in described] == [s.caption() for s in task.scenes("train")]
    assert dataclasses.is_dataclass(described[0])
