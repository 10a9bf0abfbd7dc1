"""Generated scenes for attention captioning: coloured shapes at known places, true captions.

No captioned photo set ships with seqlab, so the captioning task (Xu et al. 2015, "Show,
Attend and Tell") runs on scenes whose every fact is known: 2–3 shapes (circle, square,
triangle, cross) in 5 colours on a black square canvas (by default 64×64 px with boxes of
20–24 px, 2.5–3 cells of the captioner's 8×8 attention grid), each with its pixel box, and
a caption from a small grammar that names every object and the spatial relation between
neighbours:

    caption  := object (relation object)*
    object   := "a" colour shape
    relation := "left of" | "above" | "below"

    "a red circle left of a blue square above a white cross"

The caption is a function of the picture (so BLEU can reach 1): objects are named left to
right (by box centre); the relation of each object to the next is its dominant
displacement — "left of" when the horizontal gap is larger, else "above" / "below" (image
y grows downwards). Scenes whose facts would be ambiguous are never drawn: boxes keep a
``gap`` of empty pixels between them, centres differ by ≥ ``min_sep`` pixels in x, and for
every neighbouring pair | |dx| − |dy| | ≥ ``axis_margin``.

Train / test are disjoint by composition (``split``):

* ``"pairs"`` — ``n_held_out`` (default 42) of the 210 unordered pairs of object types
  (type = colour × shape, 20 types) never co-occur in a training (or validation) scene;
  every test scene holds at least one of them. Every type and every word is seen in
  training.
* ``"types"`` — ``n_held_out`` (default 4) colour–shape types (e.g. "red triangle") never occur in
  training; every test scene holds at least one. Each held-out type has its own colour
  and shape, so every colour and every shape is still seen, with other partners.

Everything is a pure function of the seeds: ``generate_scenes(spec, n, held_out, seed)``
returns the same scenes on every machine, and ``render(scene)`` the same pixels.

Shapes: image (H, W, 3) uint8 with H = W = ``canvas``; box = (x0, y0, x1, y1) pixels,
half-open (x0 ≤ x < x1), tight around the drawn pixels.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from seqlab.data.vocab import Vocab

__all__ = [
    "COLOURS",
    "RELATIONS",
    "SHAPES",
    "Scene",
    "SceneObject",
    "SceneSpec",
    "caption_vocab",
    "compositions",
    "generate_scenes",
    "held_out_set",
    "object_types",
    "parse_caption",
    "relation",
    "render",
    "render_batch",
    "shape_mask",
]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (50, 90, 235),
    "yellow": (235, 215, 40),
    "white": (235, 235, 235),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross")
RELATIONS: tuple[str, ...] = ("left of", "above", "below")
JITTER = 20  # each object's colour is its base colour ± up to 20 per channel

ObjectType = tuple[str, str]  # (colour, shape)
Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (half-open)


@dataclass(frozen=True)
class SceneSpec:
    """How scenes are drawn and split (the caption task's config fields of the same names).

    ``canvas`` pixels square; ``min_objects``–``max_objects`` objects of box side
    ``min_size``–``max_size``; ``gap``, ``min_sep``, ``axis_margin`` keep the facts
    unambiguous (module doc); ``split`` / ``n_held_out`` / ``split_seed`` choose the
    held-out compositions.
    """

    canvas: int = 64
    min_objects: int = 2
    max_objects: int = 3
    min_size: int = 20
    max_size: int = 24
    gap: int = 2
    min_sep: int = 6
    axis_margin: int = 4
    split: Literal["pairs", "types"] = "pairs"
    n_held_out: int | None = None
    split_seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.min_objects <= self.max_objects <= 3:
            raise ValueError(
                f"need 2 <= min_objects <= max_objects <= 3, got "
                f"{self.min_objects}, {self.max_objects}"
            )
        if not 6 <= self.min_size <= self.max_size:
            raise ValueError(
                f"need 6 <= min_size <= max_size, got {self.min_size}, {self.max_size}"
            )
        if self.max_objects * (self.max_size + self.gap) > 2 * self.canvas:
            raise ValueError(
                f"canvas {self.canvas} is too small for {self.max_objects} objects of side "
                f"{self.max_size}; use a larger canvas or smaller objects"
            )
        limit = len(_pairs()) // 2 if self.split == "pairs" else min(len(COLOURS), len(SHAPES))
        if not 1 <= self.held_out_count <= limit:
            raise ValueError(f"n_held_out must be in [1, {limit}] for split={self.split!r}")

    @property
    def held_out_count(self) -> int:
        """``n_held_out``, or by default 42 of the 210 pairs (20 %) / 4 of the 20 types."""
        if self.n_held_out is not None:
            return self.n_held_out
        return 42 if self.split == "pairs" else 4


@dataclass(frozen=True)
class SceneObject:
    """One shape: its words, its box and its exact colour (base colour + jitter)."""

    colour: str
    shape: str
    box: Box
    rgb: tuple[int, int, int]

    @property
    def centre(self) -> tuple[float, float]:
        """(x, y) of the box centre, in pixels."""
        x0, y0, x1, y1 = self.box
        return (x0 + x1) / 2, (y0 + y1) / 2

    @property
    def type(self) -> ObjectType:
        return self.colour, self.shape


@dataclass(frozen=True)
class Scene:
    """Objects in caption order (left to right) and the relation of each to the next."""

    objects: tuple[SceneObject, ...]
    relations: tuple[str, ...]
    canvas: int

    def tokens(self) -> list[str]:
        words = ["a", self.objects[0].colour, self.objects[0].shape]
        for rel, obj in zip(self.relations, self.objects[1:]):
            words += [*rel.split(), "a", obj.colour, obj.shape]
        return words

    def caption(self) -> str:
        return " ".join(self.tokens())


def object_types() -> list[ObjectType]:
    """The 20 (colour, shape) types, colours outer."""
    return [(c, s) for c in COLOURS for s in SHAPES]


def _pairs() -> list[tuple[ObjectType, ObjectType]]:
    """Unordered pairs of types, repetition allowed (210)."""
    return list(itertools.combinations_with_replacement(object_types(), 2))


def held_out_set(spec: SceneSpec) -> frozenset:
    """The held-out compositions: type pairs (sorted tuples) or types, from ``split_seed``."""
    rng = np.random.default_rng([spec.split_seed, 0x5CE])
    if spec.split == "pairs":
        pairs = _pairs()
        chosen = rng.choice(len(pairs), size=spec.held_out_count, replace=False)
        return frozenset(pairs[int(i)] for i in chosen)
    colours = [list(COLOURS)[int(i)] for i in rng.permutation(len(COLOURS))]
    shapes = [SHAPES[int(i)] for i in rng.permutation(len(SHAPES))]
    return frozenset(zip(colours[: spec.held_out_count], shapes[: spec.held_out_count]))


def compositions(types: Sequence[ObjectType], split: Literal["pairs", "types"]) -> set:
    """What a scene composes: its types ("types"), or its unordered type pairs ("pairs"),
    each pair in ``object_types()`` order as in ``held_out_set``."""
    if split == "types":
        return set(types)
    rank = {t: i for i, t in enumerate(object_types())}
    return {tuple(sorted(p, key=rank.__getitem__)) for p in itertools.combinations(types, 2)}


def relation(a: SceneObject, b: SceneObject) -> str:
    """The relation of ``a`` to ``b`` (``a`` further left): dx = x_b − x_a > 0,
    dy = y_b − y_a; "left of" if dx > |dy|, else "above" if dy > 0, else "below"."""
    (xa, ya), (xb, yb) = a.centre, b.centre
    dx, dy = xb - xa, yb - ya
    if dx > abs(dy):
        return "left of"
    return "above" if dy > 0 else "below"


def shape_mask(shape: str, size: int) -> np.ndarray:
    """The pixels of ``shape`` in a size × size box, tight (it touches all four sides).

    circle: (x − c)² + (y − c)² ≤ (size/2)² at pixel centres, c = size/2; square: all;
    triangle (apex up): |x − c| ≤ (y + 1)/2; cross: bars of width size/3 through the centre.

    Shapes: returns (size, size) bool, [y, x]
    """
    p = np.arange(size) + 0.5  # (size,) pixel centres
    y, x = p[:, None], p[None, :]  # (size, 1), (1, size)
    c = size / 2
    if shape == "circle":
        return (x - c) ** 2 + (y - c) ** 2 <= c**2  # (size, size)
    if shape == "square":
        return np.ones((size, size), dtype=bool)  # (size, size)
    if shape == "triangle":
        return np.abs(x - c) <= (y + 0.5) / 2  # (size, size)  row y: half-width (y+1)/2
    if shape == "cross":
        return (np.abs(x - c) <= size / 6) | (np.abs(y - c) <= size / 6)  # (size, size)
    raise ValueError(f"unknown shape {shape!r}; expected one of {', '.join(SHAPES)}")


def render(scene: Scene) -> np.ndarray:
    """The scene's picture: black canvas, each object's mask in its colour.

    Shapes: returns (H, W, 3) uint8, H = W = canvas
    """
    image = np.zeros((scene.canvas, scene.canvas, 3), dtype=np.uint8)  # (H, W, 3)
    for obj in scene.objects:
        x0, y0, x1, y1 = obj.box
        mask = shape_mask(obj.shape, x1 - x0)  # (s, s)
        image[y0:y1, x0:x1][mask] = obj.rgb
    return image


def render_batch(scenes: Sequence[Scene]) -> np.ndarray:
    """Stacked pictures.  Shapes: returns (B, H, W, 3) uint8."""
    return np.stack([render(s) for s in scenes])  # (B, H, W, 3)


MAX_OBJECTS = 3
_SLOTS = np.arange(MAX_OBJECTS)  # (3,) object slots; a scene with k objects uses slots < k


def _held_tables(spec: SceneSpec) -> tuple[np.ndarray, np.ndarray]:
    """Held-out compositions as lookup tables over type ids (t = colour·|shapes| + shape):
    pair_held (20, 20) symmetric bool, type_held (20,) bool."""
    index = {t: i for i, t in enumerate(object_types())}
    n = len(index)
    pair_held = np.zeros((n, n), dtype=bool)  # (20, 20)
    type_held = np.zeros(n, dtype=bool)  # (20,)
    for item in held_out_set(spec):
        if spec.split == "pairs":
            a, b = index[item[0]], index[item[1]]
            pair_held[a, b] = pair_held[b, a] = True
        else:
            type_held[index[item]] = True
    return pair_held, type_held


def _composes_held(
    t: np.ndarray, k: np.ndarray, spec: SceneSpec, tables: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Whether each scene's first k types compose a held-out pair / type.

    Shapes: t (N, 3) type ids, k (N,) -> (N,) bool
    """
    used = _SLOTS[None, :] < k[:, None]  # (N, 3)
    pair_held, type_held = tables
    if spec.split == "types":
        return (type_held[t] & used).any(axis=1)  # (N,)
    both = used[:, :, None] & used[:, None, :] & ~np.eye(MAX_OBJECTS, dtype=bool)  # (N, 3, 3)
    return (pair_held[t[:, :, None], t[:, None, :]] & both).any(axis=(1, 2))  # (N,)


def _draw_types(
    rng: np.random.Generator, k: np.ndarray, spec: SceneSpec, held_out: bool
) -> np.ndarray:
    """Type ids per scene whose composition avoids (train) or includes (test) a held-out one.

    Train: redraw the scenes that compose a held-out item until none does. Test: slot 0
    (and 1 for pairs) get a held-out item, the rest are uniform, then the k used slots of
    each scene are shuffled.

    Shapes: k (N,) objects per scene -> (N, 3) type ids (slots ≥ k unused)
    """
    n_types = len(object_types())
    tables = _held_tables(spec)
    N = k.shape[0]
    t = rng.integers(0, n_types, size=(N, MAX_OBJECTS))  # (N, 3)
    if not held_out:
        bad = _composes_held(t, k, spec, tables)  # (N,)
        while bad.any():
            t[bad] = rng.integers(0, n_types, size=(int(bad.sum()), MAX_OBJECTS))  # (n_bad, 3)
            bad = _composes_held(t, k, spec, tables)  # (N,)
        return t
    index = {ty: i for i, ty in enumerate(object_types())}
    items = sorted(held_out_set(spec), key=str)
    pick = rng.integers(0, len(items), size=N)  # (N,)
    if spec.split == "pairs":
        held_ids = np.array([[index[a], index[b]] for a, b in items])  # (H, 2)
        t[:, :2] = held_ids[pick]  # (N, 2)
    else:
        held_ids = np.array([index[ty] for ty in items])  # (H,)
        t[:, 0] = held_ids[pick]  # (N,)
    keys = rng.random((N, MAX_OBJECTS)) + (_SLOTS[None, :] >= k[:, None])  # (N, 3) unused last
    return np.take_along_axis(t, np.argsort(keys, axis=1), axis=1)  # (N, 3)


def _draw_boxes(
    rng: np.random.Generator, k: np.ndarray, spec: SceneSpec, tries: int = 16
) -> np.ndarray:
    """Boxes sorted left to right that satisfy the unambiguity rules (module doc).

    Rejection sampling: ``tries`` candidate layouts per pending scene per round; a scene
    takes its first valid one; scenes with none try again next round.

    Shapes: k (N,) -> (N, 3, 4) int boxes (x0, y0, x1, y1); slots ≥ k are unused
    """
    N, n, g = k.shape[0], MAX_OBJECTS, spec.gap
    out = np.zeros((N, n, 4), dtype=np.int64)  # (N, 3, 4)
    pending = np.arange(N)  # (P,)
    for _ in range(1000):
        if pending.size == 0:
            return out
        P = pending.size
        s = rng.integers(spec.min_size, spec.max_size + 1, size=(P, tries, n))  # (P, K, 3)
        x0 = rng.integers(0, spec.canvas - s + 1)  # (P, K, 3)
        y0 = rng.integers(0, spec.canvas - s + 1)  # (P, K, 3)
        used = _SLOTS[None, None, :] < k[pending, None, None]  # (P, 1, 3)
        key = np.where(used, 2 * x0 + s, 10 * spec.canvas)  # (P, K, 3) unused slots last
        order = np.argsort(key, axis=2, kind="stable")  # (P, K, 3) left to right
        s, x0, y0 = (np.take_along_axis(a, order, axis=2) for a in (s, x0, y0))  # (P, K, 3)
        x1, y1 = x0 + s, y0 + s  # (P, K, 3)
        apart = (  # (P, K, 3, 3) at least g empty pixels between boxes i and j along x or y
            (x1[..., :, None] + g <= x0[..., None, :])
            | (x1[..., None, :] + g <= x0[..., :, None])
            | (y1[..., :, None] + g <= y0[..., None, :])
            | (y1[..., None, :] + g <= y0[..., :, None])
        )
        pair = used[..., :, None] & used[..., None, :] & ~np.eye(n, dtype=bool)  # (P, 1, 3, 3)
        ok = (apart | ~pair).all(axis=(2, 3))  # (P, K)
        dx = np.diff(x0 + x1, axis=2) / 2  # (P, K, 2) centre gaps of neighbours, ≥ 0
        dy = np.diff(y0 + y1, axis=2) / 2  # (P, K, 2)
        neighbours = used[..., 1:]  # (P, 1, 2) pair (j, j+1) exists iff slot j+1 is used
        fine = (dx >= spec.min_sep) & (np.abs(dx - np.abs(dy)) >= spec.axis_margin)  # (P, K, 2)
        ok &= (fine | ~neighbours).all(axis=2)  # (P, K)
        found = ok.any(axis=1)  # (P,)
        first = ok.argmax(axis=1)  # (P,)
        rows = np.arange(P)[found]  # (F,)
        boxes = np.stack([x0, y0, x1, y1], axis=-1)  # (P, K, 3, 4)
        out[pending[found]] = boxes[rows, first[found]]  # (F, 3, 4)
        pending = pending[~found]
    raise RuntimeError("could not place the objects; loosen the SceneSpec constraints")


def generate_scenes(spec: SceneSpec, n: int, held_out: bool, seed: int) -> list[Scene]:
    """n scenes drawn from ``seed``; ``held_out`` scenes each contain a held-out composition
    (test), the others none (train / validation).  Deterministic in (spec, n, held_out, seed)."""
    rng = np.random.default_rng([seed, int(held_out), 0x5CE7E])
    k = rng.integers(spec.min_objects, spec.max_objects + 1, size=n)  # (n,)
    types = _draw_types(rng, k, spec, held_out).tolist()  # (n, 3)
    boxes = _draw_boxes(rng, k, spec).tolist()  # (n, 3, 4)
    jitter = rng.integers(-JITTER, JITTER + 1, size=(n, MAX_OBJECTS, 3)).tolist()  # (n, 3, 3)
    all_types = object_types()
    scenes = []
    for i in range(n):
        objects = []
        for j in range(int(k[i])):
            colour, shape = all_types[types[i][j]]
            rgb = tuple(min(255, max(0, c + d)) for c, d in zip(COLOURS[colour], jitter[i][j]))
            objects.append(SceneObject(colour, shape, tuple(boxes[i][j]), rgb))
        rels = tuple(relation(a, b) for a, b in zip(objects, objects[1:]))
        scenes.append(Scene(tuple(objects), rels, spec.canvas))
    return scenes


def parse_caption(text: str) -> tuple[list[ObjectType], list[str]]:
    """A caption of the grammar → ([(colour, shape), …], [relation, …]).

    Raises ValueError naming the first word that does not fit the grammar.
    """
    words = text.split()
    objects: list[ObjectType] = []
    rels: list[str] = []
    i = 0
    while True:
        if i + 3 > len(words) or words[i] != "a":
            raise ValueError(f"expected 'a <colour> <shape>' at word {i} of {text!r}")
        colour, shape = words[i + 1], words[i + 2]
        if colour not in COLOURS or shape not in SHAPES:
            raise ValueError(f"unknown colour/shape {colour!r} {shape!r} in {text!r}")
        objects.append((colour, shape))
        i += 3
        if i == len(words):
            return objects, rels
        if words[i] == "left" and i + 1 < len(words) and words[i + 1] == "of":
            rels.append("left of")
            i += 2
        elif words[i] in ("above", "below"):
            rels.append(words[i])
            i += 1
        else:
            raise ValueError(f"expected a relation at word {i} of {text!r}")


def caption_vocab() -> Vocab:
    """The fixed caption vocabulary: specials (ids 0–3), then the grammar's words."""
    words = ["a", *COLOURS, *SHAPES, "left", "of", "above", "below"]
    return Vocab(words)
