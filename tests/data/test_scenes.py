"""Generated scenes: deterministic, boxes tight around the drawn pixels, captions that parse
back to the scene's facts and agree with its geometry, train/test disjoint by composition."""

import numpy as np
import pytest

from seqlab.data.scenes import (
    COLOURS,
    SHAPES,
    SceneSpec,
    caption_vocab,
    compositions,
    generate_scenes,
    held_out_set,
    object_types,
    parse_caption,
    render,
    shape_mask,
)
from seqlab.data.vocab import BOS_ID, EOS_ID

SPEC = SceneSpec()


def test_same_seed_same_scenes_and_pixels_other_seed_differs():
    a = generate_scenes(SPEC, 40, held_out=False, seed=7)
    b = generate_scenes(SPEC, 40, held_out=False, seed=7)
    c = generate_scenes(SPEC, 40, held_out=False, seed=8)
    assert a == b
    assert all(np.array_equal(render(x), render(y)) for x, y in zip(a, b))
    assert a != c
    # A prefix of a longer draw is not promised, but the same call is: test/held-out too.
    assert generate_scenes(SPEC, 10, True, 3) == generate_scenes(SPEC, 10, True, 3)


def test_shape_masks_by_hand():
    """Golden masks: pixel centres (x + ½, y + ½), c = size / 2."""
    tri = np.array(
        [
            [0, 1, 1, 0],  # row 0: |x − 2| ≤ 1/2 → x + ½ ∈ {1.5, 2.5}
            [0, 1, 1, 0],  # row 1: |x − 2| ≤ 1
            [1, 1, 1, 1],  # row 2: |x − 2| ≤ 3/2
            [1, 1, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(shape_mask("triangle", 4), tri)
    circle = np.array(
        [[0, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 0]], dtype=bool
    )  # corner centre (0.5, 0.5): 1.5² + 1.5² = 4.5 > 4
    np.testing.assert_array_equal(shape_mask("circle", 4), circle)
    cross = np.zeros((6, 6), dtype=bool)
    cross[2:4, :] = cross[:, 2:4] = True  # |x + ½ − 3| ≤ 1 → x ∈ {2, 3}
    np.testing.assert_array_equal(shape_mask("cross", 6), cross)
    assert shape_mask("square", 5).all()
    with pytest.raises(ValueError, match="unknown shape 'star'"):
        shape_mask("star", 4)


@pytest.mark.parametrize("held_out", [False, True])
def test_boxes_are_tight_around_the_drawn_pixels(held_out):
    for scene in generate_scenes(SPEC, 60, held_out, seed=1):
        image = render(scene)  # (H, W, 3)
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        drawn = image.any(axis=-1)  # (H, W)
        covered = np.zeros_like(drawn)
        for obj in scene.objects:
            x0, y0, x1, y1 = obj.box
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64 and x1 - x0 == y1 - y0
            inside = drawn[y0:y1, x0:x1]  # (s, s)
            # tight: the drawn pixels touch all four sides of the box
            assert inside[0].any() and inside[-1].any()
            assert inside[:, 0].any() and inside[:, -1].any()
            np.testing.assert_array_equal(inside, shape_mask(obj.shape, x1 - x0))
            assert (image[y0:y1, x0:x1][inside] == obj.rgb).all()
            base = np.array(COLOURS[obj.colour])
            assert np.abs(np.array(obj.rgb) - base).max() <= 20
            covered[y0:y1, x0:x1] = True
        assert not (drawn & ~covered).any(), "a pixel was drawn outside every box"


@pytest.mark.parametrize("held_out", [False, True])
def test_captions_parse_back_to_the_scene_and_match_its_geometry(held_out):
    for scene in generate_scenes(SPEC, 80, held_out, seed=2):
        types, rels = parse_caption(scene.caption())
        assert types == [o.type for o in scene.objects]
        assert tuple(rels) == scene.relations
        assert 2 <= len(types) <= 3
        centres = [o.centre for o in scene.objects]
        for (xa, ya), (xb, yb), rel in zip(centres, centres[1:], rels):
            dx, dy = xb - xa, yb - ya
            assert dx >= SPEC.min_sep  # named left to right, never a near tie
            assert abs(dx - abs(dy)) >= SPEC.axis_margin  # the dominant axis is clear
            expected = "left of" if dx > abs(dy) else ("above" if dy > 0 else "below")
            assert rel == expected
        for a in scene.objects:  # at least `gap` empty pixels between any two boxes
            for b in scene.objects:
                if a is not b:
                    ax0, ay0, ax1, ay1 = a.box
                    bx0, by0, bx1, by1 = b.box
                    assert ax1 + 2 <= bx0 or bx1 + 2 <= ax0 or ay1 + 2 <= by0 or by1 + 2 <= ay0


def test_parse_caption_rejects_text_outside_the_grammar():
    assert parse_caption("a red circle") == ([("red", "circle")], [])
    assert parse_caption("a red circle left of a blue square below a white cross") == (
        [("red", "circle"), ("blue", "square"), ("white", "cross")],
        ["left of", "below"],
    )
    for bad in ["", "a red", "a pink circle", "a red circle near a blue square", "red circle"]:
        with pytest.raises(ValueError):
            parse_caption(bad)


@pytest.mark.parametrize("split", ["pairs", "types"])
def test_train_and_test_are_disjoint_by_composition(split):
    spec = SceneSpec(split=split)
    held = held_out_set(spec)
    assert len(held) == (42 if split == "pairs" else 4)
    train = generate_scenes(spec, 400, held_out=False, seed=0)
    test = generate_scenes(spec, 200, held_out=True, seed=0)
    train_comp = set().union(*(compositions([o.type for o in s.objects], split) for s in train))
    assert not train_comp & held
    for s in test:
        assert compositions([o.type for o in s.objects], split) & held
    # every word is still seen in training
    seen = {w for s in train for w in s.tokens()}
    assert set(COLOURS) | set(SHAPES) <= seen
    if split == "types":  # each held-out type has its own colour and shape
        assert len({c for c, _ in held}) == len({s for _, s in held}) == len(held)
    else:  # every type occurs in training, just not with its held-out partners
        assert {o.type for s in train for o in s.objects} == set(object_types())
    assert held_out_set(spec) == held  # from split_seed alone
    assert held_out_set(SceneSpec(split=split, split_seed=1)) != held


def test_spec_validation():
    with pytest.raises(ValueError, match="min_objects"):
        SceneSpec(min_objects=1)
    with pytest.raises(ValueError, match="n_held_out"):
        SceneSpec(split="types", n_held_out=5)
    with pytest.raises(ValueError, match="too small"):
        SceneSpec(canvas=24)


def test_caption_vocab_is_fixed_and_round_trips():
    vocab = caption_vocab()
    assert vocab.tokens[4:] == [
        "a",
        *COLOURS,
        *SHAPES,
        "left",
        "of",
        "above",
        "below",
    ]
    scene = generate_scenes(SPEC, 1, False, 0)[0]
    ids = vocab.encode(scene.tokens(), add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and 1 not in ids  # no <unk>
    assert " ".join(vocab.decode(ids, skip_specials=True)) == scene.caption()
