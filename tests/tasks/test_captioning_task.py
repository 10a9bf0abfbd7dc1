"""The caption task: batches, loss = CE + λ·(doubly stochastic term), BLEU-4 and the
attention-localisation metric on hand-made attention maps, the overlay PNG, and one
end-to-end train → load → evaluate run through seqlab.api."""

import math

import pytest
import torch

from seqlab import api
from seqlab.config import ConfigError
from seqlab.data.scenes import (
    Scene,
    SceneObject,
    caption_vocab,
    compositions,
    held_out_set,
    render,
)
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.errors import SeqlabError
from seqlab.inspect.captions import CaptionPanel, plot_caption_attention
from seqlab.models.captioner import ShowAttendTell, ShowAttendTellConfig, doubly_stochastic_penalty
from seqlab.tasks.base import token_cross_entropy
from seqlab.tasks.captioning import CaptionConfig, CaptionTask, Described, localisation

SMALL = {"n_train": 40, "n_valid": 6, "n_test": 6, "canvas": 32, "min_size": 8, "max_size": 10}
TINY_MODEL = {"channels": (4, 8, 8), "kernels": (3, 3, 1), "emb_dim": 8, "hidden_size": 12}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make_task(**kw):
    task = CaptionTask(CaptionConfig(**{**SMALL, **kw}))
    task.prepare()
    return task


def tiny_model(task):
    torch.manual_seed(0)
    cfg = ShowAttendTellConfig(**TINY_MODEL, attn_dim=8, dropout=0.0)
    return ShowAttendTell(cfg, **task.model_kwargs())


def hand_scene():
    """red circle in x∈[0,16) y∈[0,16); blue square in x∈[40,56) y∈[8,24); 64×64 canvas."""
    red = SceneObject("red", "circle", (0, 0, 16, 16), (220, 40, 40))
    blue = SceneObject("blue", "square", (40, 8, 56, 24), (50, 90, 235))
    return Scene((red, blue), ("left of",), 64)


def one_hot(region, L=64):
    return torch.eye(L, dtype=torch.float64)[region]  # (L,)


def test_localisation_on_hand_made_attention_maps():
    """8×8 grid over 64×64: region i has its centre at ((i % 8)·8 + 4, (i // 8)·8 + 4)."""
    scene = hand_scene()
    words = ["a", "red", "circle", "left", "of", "a", "blue", "square"]
    rows = [
        one_hot(63),  # "a": not an object word, ignored
        one_hot(9),  # "red": centre (12, 12), inside the red box → hit
        one_hot(5),  # "circle": centre (44, 4), inside no box → miss
        one_hot(0),  # "left"
        one_hot(0),  # "of"
        one_hot(0),  # "a"
        0.6 * one_hot(13) + 0.4 * one_hot(0),  # "blue": peak (44, 12) in the blue box → hit
        0.4 * one_hot(13) + 0.6 * one_hot(0),  # "square": peak (4, 4) in the red box → miss
    ]
    hits, masses = localisation(words, torch.stack(rows), scene, (8, 8))
    assert hits == [True, False, True, False]
    # mass on the referents' boxes: red box holds the centres of regions 0, 1, 8, 9;
    # the blue box those of 13, 14, 21, 22
    assert masses == pytest.approx([1.0, 0.0, 0.6, 0.4], abs=1e-12)


def test_localisation_referents_follow_the_phrase_then_the_word():
    scene = hand_scene()
    # "blue circle" names no object: "blue" refers to the blue square, "circle" to the circle
    words = ["a", "blue", "circle"]
    alpha = torch.stack([one_hot(0), one_hot(13), one_hot(0)])  # (3, 64)
    hits, _ = localisation(words, alpha, scene, (8, 8))
    assert hits == [True, True]
    # a word that describes nothing in the picture is a miss wherever the model looks
    hits, masses = localisation(["a", "green", "cross"], alpha, scene, (8, 8))
    assert hits == [False, False] and masses == [0.0, 0.0]


def test_collate_builds_teacher_forcing_batches():
    task = make_task()
    batch = task.collate([0, 3, 5], "train")
    scenes = task.scenes("train")
    assert batch.images.shape == (3, 3, 32, 32) and batch.images.dtype == torch.float32
    assert float(batch.images.min()) >= 0.0 and float(batch.images.max()) <= 1.0
    assert (batch.y_in[:, 0] == BOS_ID).all()
    for b, i in enumerate([0, 3, 5]):
        m = len(scenes[i].tokens())
        assert task.words(batch.y_out[b].tolist()) == scenes[i].tokens()
        assert batch.y_out[b, m] == EOS_ID and batch.tgt_mask[b].sum() == m + 1
        assert torch.equal(batch.y_in[b, 1 : m + 1], batch.y_out[b, :m])
    assert batch.n_tokens == int(batch.tgt_mask.sum())
    assert list(task.train_lengths()[[0, 3, 5]]) == [len(scenes[i].tokens()) + 1 for i in (0, 3, 5)]


def test_loss_is_cross_entropy_plus_lambda_times_the_doubly_stochastic_term():
    task = make_task(lambda_ds=0.7)
    model = tiny_model(task).eval()
    batch = task.collate([0, 1, 2, 3], "train")
    out = task.loss(model, batch)
    logits, alpha, _ = model(batch.images, None, batch.y_in, batch.tgt_mask, return_attention=True)
    ce = token_cross_entropy(logits, batch.y_out, PAD_ID)
    ds = doubly_stochastic_penalty(alpha, batch.tgt_mask).sum()
    torch.testing.assert_close(out.loss_sum, ce.loss_sum + 0.7 * ds, atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(out.nll_sum, ce.nll_sum, atol=0, rtol=0)  # NLL has no penalty
    assert out.n_tokens == batch.n_tokens
    off = make_task(lambda_ds=0.0).loss(model, batch)
    torch.testing.assert_close(off.loss_sum, ce.loss_sum, atol=0, rtol=0)


def test_score_of_perfect_and_of_wrong_captions():
    task = make_task()
    scenes = task.scenes("test")[:4]
    L = 16
    alpha = torch.full((14, L), 1.0 / L)
    perfect = [Described(s, s.tokens(), alpha, torch.ones(14)) for s in scenes]
    model = tiny_model(task)
    metrics = task.score(perfect, model)
    assert metrics["bleu4"] == pytest.approx(1.0) and metrics["bleu"] == pytest.approx(100.0)
    assert metrics["exact_match"] == 1.0
    assert metrics["object_words"] == sum(2 * len(s.objects) for s in scenes)
    empty = [Described(s, [], alpha, torch.ones(14)) for s in scenes]
    metrics = task.score(empty, model)
    assert metrics["bleu4"] == 0.0 and metrics["exact_match"] == 0.0
    assert metrics["localisation"] == 0.0 and metrics["object_words"] == 0.0


def test_splits_are_disjoint_by_composition_and_seeded():
    task = make_task(split="types", n_train=60, n_test=20)
    held = held_out_set(task.spec)
    for split, expect in [("train", False), ("valid", False), ("test", True)]:
        for s in task.scenes(split):
            assert bool(compositions([o.type for o in s.objects], "types") & held) is expect
    assert task.scenes("train") == make_task(split="types", n_train=60).scenes("train")
    assert task.scenes("valid") != task.scenes("train")[:6]
    with pytest.raises(SeqlabError, match="no split 'dev'"):
        task.scenes("dev")


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="task.max_caption_len"):
        CaptionConfig(max_caption_len=5)
    with pytest.raises(ConfigError, match="task.lambda_ds"):
        CaptionConfig(lambda_ds=-1.0)
    with pytest.raises(ConfigError, match="n_held_out"):
        CaptionConfig(split="types", n_held_out=9)


def test_overlay_png(tmp_path):
    task = make_task()
    model = tiny_model(task)
    described = task.describe(model, "test", [0, 1])
    panels = [
        CaptionPanel(
            image=render(d.scene),
            words=d.words or ["(empty)"],
            alpha=d.alpha if d.words else torch.full((1, 16), 1 / 16),
            grid=model.grid,
            boxes=[o.box for o in d.scene.objects],
            beta=d.beta,
            reference=d.scene.caption(),
        )
        for d in described
    ]
    path = plot_caption_attention(panels, tmp_path / "fig" / "att.png", title="test")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert not (tmp_path / "fig" / "att.png.tmp").exists()
    with pytest.raises(ValueError, match="regions"):
        bad = CaptionPanel(panels[0].image, ["a"], torch.ones(1, 5) / 5, (4, 4))
        plot_caption_attention([bad], tmp_path / "bad.png")


def test_train_load_evaluate_end_to_end(tmp_path):
    run = api.train(
        {
            "task": {"name": "caption", **SMALL},
            "model": {"name": "show_attend_tell", **TINY_MODEL, "attn_dim": 8},
            "train": {
                "max_steps": 4,
                "valid_every": 2,
                "save_every": 2,
                "progress": False,
                "threads": 1,
                "precision": "fp32",
                "early_stop_metric": "bleu4",
                "early_stop_mode": "max",
                "batch": {"max_tokens": 256, "max_sentences": 16},
            },
        },
        run_dir=tmp_path / "run",
        quiet=True,
    )
    assert run.metrics["step"] == 4
    loaded = api.load(tmp_path / "run", prefer="latest")
    metrics = loaded.evaluate("test")
    for key in ("bleu4", "bleu", "localisation", "bleu4_beam", "localisation_beam", "ppl"):
        assert key in metrics and math.isfinite(metrics[key])
    assert metrics["bleu4"] == pytest.approx(metrics["bleu"] / 100)
    assert 0.0 <= metrics["localisation"] <= 1.0
    assert loaded.task.vocab == caption_vocab()  # restored from the checkpoint's state
    valid = loaded.evaluate("valid")
    assert "bleu4_beam" not in valid  # valid_beam = 1: greedy only
