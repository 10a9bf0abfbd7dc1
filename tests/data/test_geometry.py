"""Generated pointer-network data and polygon geometry (seqlab.data.geometry).

The hull labels (scipy's Qhull, rotated to the canonical order) are checked against a
brute-force hull; the shoelace area, the simplicity test and the coverage against
polygons worked by hand. Areas are compared with atol 1e-12 (rtol 0).
"""

import itertools

import numpy as np
import pytest

from seqlab.data.geometry import (
    convex_hull,
    hull_coverage,
    is_simple_polygon,
    make_examples,
    segments_intersect,
    shoelace_area,
    sort_order,
)

ATOL = 1e-12


def brute_force_hull(points: np.ndarray) -> list[int]:
    """O(n³): i → j is a counter-clockwise hull edge iff every other point lies strictly
    to its left; follow the edges from the smallest index on the hull."""
    n = len(points)
    p = points.astype(np.float64)
    nxt = {}
    for i, j in itertools.permutations(range(n), 2):
        others = [k for k in range(n) if k not in (i, j)]
        a, b = p[i], p[j]
        cross = [
            (b[0] - a[0]) * (p[k][1] - a[1]) - (b[1] - a[1]) * (p[k][0] - a[0]) for k in others
        ]
        if all(c > 0 for c in cross):
            nxt[i] = j
    start = min(nxt)
    out, cur = [start], nxt[start]
    while cur != start:
        out.append(cur)
        cur = nxt[cur]
    return out


def test_hull_labels_equal_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(3, 13))
        points = rng.random((n, 2)).astype(np.float32)
        assert convex_hull(points).tolist() == brute_force_hull(points)


def test_hull_by_hand():
    # a square's corners (shuffled) and two interior points
    pts = np.array([[0.5, 0.5], [1, 1], [0, 0], [0.2, 0.3], [0, 1], [1, 0]], dtype=float)
    assert convex_hull(pts).tolist() == [1, 4, 2, 5]  # from index 1, counter-clockwise
    with pytest.raises(ValueError, match="n >= 3"):
        convex_hull(pts[:2])


def test_make_examples_are_seeded_and_canonical():
    a = make_examples("hull", 40, 3, 12, seed=5)
    b = make_examples("hull", 40, 3, 12, seed=5)
    c = make_examples("hull", 40, 3, 12, seed=6)
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c) if x[0].shape == y[0].shape)
    sizes = set()
    for points, hull in a:
        sizes.add(len(points))
        assert points.dtype == np.float32 and points.shape[1] == 2
        assert hull[0] == hull.min() and len(set(hull.tolist())) == len(hull) >= 3
        assert shoelace_area(points[hull]) > 0  # counter-clockwise
    assert len(sizes) > 3
    for points, order in make_examples("sort", 20, 10, 10, seed=1):
        assert points.shape == (10, 1) and sorted(order.tolist()) == list(range(10))
        assert np.all(np.diff(points[order, 0]) > 0)
    assert sort_order(np.array([0.3, 0.1, 0.2])).tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match="n_min"):
        make_examples("hull", 3, 2, 5, seed=0)


def test_shoelace_area_on_hand_polygons():
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]])
    assert shoelace_area(square) == pytest.approx(1.0, abs=ATOL, rel=0)
    assert shoelace_area(square[::-1]) == pytest.approx(-1.0, abs=ATOL, rel=0)  # clockwise
    assert shoelace_area(np.array([[0, 0], [4, 0], [0, 3]])) == pytest.approx(6.0, abs=ATOL)
    # L-shape (concave): 2×2 square minus its 1×1 top-right corner = 3
    ell = np.array([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]])
    assert shoelace_area(ell) == pytest.approx(3.0, abs=ATOL, rel=0)
    assert shoelace_area(np.array([[0, 0], [1, 1]])) == 0.0


def test_simple_polygons_and_segment_intersection():
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=float)
    assert is_simple_polygon(square)
    assert is_simple_polygon(np.array([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]]))
    assert not is_simple_polygon(square[[0, 2, 1, 3]])  # bow-tie: edges cross
    assert not is_simple_polygon(square[[0, 1, 2, 1]])  # repeated vertex
    assert not is_simple_polygon(np.array([[0, 0], [1, 1], [2, 2]]))  # zero area
    assert not is_simple_polygon(square[:2])
    p = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    q = np.array([[2.0, 2.0], [1.0, 0.0], [2.0, 2.0], [1.0, 1.0], [2.0, 0.0]])
    r = np.array([[0.0, 2.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0], [1.0, 0.0]])
    s = np.array([[2.0, 0.0], [1.0, 1.0], [3.0, 3.0], [3.0, 3.0], [1.0, 5.0]])
    # crossing diagonals; disjoint parallel; collinear overlap; collinear apart; T-touch
    assert segments_intersect(p, q, r, s).tolist() == [True, False, True, False, True]


def test_hull_coverage_by_hand():
    """Square corners + centre: the true hull has area 1."""
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]], dtype=float)
    hull = np.array([0, 1, 2, 3])
    assert hull_coverage(pts, hull, hull) == pytest.approx(1.0, abs=ATOL, rel=0)
    assert hull_coverage(pts, np.array([1, 2, 3, 0]), hull) == pytest.approx(1.0, abs=ATOL)
    assert hull_coverage(pts, np.array([0, 1, 2]), hull) == pytest.approx(0.5, abs=ATOL)
    # a notch through the centre: 1 − area of triangle (1,0) (1,1) (.5,.5) = 0.75
    notch = np.array([0, 1, 4, 2, 3])
    assert hull_coverage(pts, notch, hull) == pytest.approx(0.75, abs=ATOL, rel=0)
    assert hull_coverage(pts, np.array([0, 2, 1, 3]), hull) == 0.0  # self-intersecting
    assert hull_coverage(pts, np.array([0, 1]), hull) == 0.0  # not a polygon
    assert hull_coverage(pts, np.array([0, 1, 7]), hull) == 0.0  # no such point
    assert hull_coverage(pts, np.array([0, 1, 2, 0]), hull) == 0.0  # repeated vertex
