"""Generated data for pointer networks: the planar convex hull (Vinyals, Fortunato &
Jaitly 2015, §4.2) and sorting numbers ("Order Matters", Vinyals, Bengio & Kudlur 2016,
§4.4), and the polygon geometry used to score a hull.

Every problem maps n input vectors P = (P_1 … P_n) to a sequence of input indices
C = (C_1 … C_m) (0-based here; the model adds 1 so that position 0 is its END symbol):

* sort:  P_j ~ U[0, 1) scalars (D = 1); C = the indices in ascending order of P_j (m = n).
* hull:  P_j ~ U[0, 1)² (D = 2); C = the vertices of the convex hull of P, counter-
  clockwise, starting at the smallest index on the hull (the paper's canonical order).
  Labels come from ``scipy.spatial.ConvexHull`` (Qhull), whose 2-D ``vertices`` are
  counter-clockwise; tests/data/test_geometry.py checks them against a brute-force hull.

Points are drawn in float64 and rounded to float32 *before* the hull is computed, so the
labels are exact for the float32 inputs the model sees. Uniform points are in general
position with probability 1 (no three collinear, no duplicates).

The polygon helpers score a predicted hull: ``shoelace_area`` (signed, > 0 when counter-
clockwise), ``is_simple_polygon`` (no repeated vertex, no crossing edges, area > 0) and
``hull_coverage`` = area(predicted polygon ∩ true hull) / area(true hull), 0 for an
invalid polygon. A simple polygon whose vertices are input points lies inside the convex
hull of the inputs, so the intersection is the predicted polygon itself and the coverage
is |A(predicted)| / A(hull) exactly (no polygon clipping library needed).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Problem = Literal["sort", "hull"]
Example = tuple[np.ndarray, np.ndarray]  # points (n, D) float32, target (m,) int64 0-based

INPUT_DIM: dict[str, int] = {"sort": 1, "hull": 2}


def convex_hull(points: np.ndarray) -> np.ndarray:
    """Indices of the hull vertices of planar points, counter-clockwise, starting at the
    smallest index on the hull.

    Shapes: points (n, 2), n ≥ 3, not all collinear -> (m,) int64, 3 ≤ m ≤ n
    """
    from scipy.spatial import ConvexHull  # here: importing it costs every process ~25 MiB

    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] < 3:
        raise ValueError(f"convex_hull needs (n, 2) points with n >= 3, got {pts.shape}")
    vertices = ConvexHull(pts).vertices.astype(np.int64)  # (m,) counter-clockwise in 2-D
    return np.roll(vertices, -int(np.argmin(vertices)))  # (m,) start at the lowest index


def sort_order(values: np.ndarray) -> np.ndarray:
    """Indices of ``values`` in ascending order (stable).  Shapes: (n,) or (n, 1) -> (n,)."""
    return np.argsort(np.asarray(values).reshape(-1), kind="stable").astype(np.int64)  # (n,)


def make_examples(
    problem: Problem, n_examples: int, n_min: int, n_max: int, seed: int
) -> list[Example]:
    """``n_examples`` (points, target) pairs, n drawn uniformly from [n_min, n_max].

    The same ``seed`` gives the same examples (a local ``numpy`` Generator; no global RNG).

    Shapes: each example: points (n, D) float32 (D = 1 sort, 2 hull), target (m,) int64
    """
    if problem not in INPUT_DIM:
        raise ValueError(f"problem must be 'sort' or 'hull', got {problem!r}")
    least = 3 if problem == "hull" else 1
    if not least <= n_min <= n_max:
        raise ValueError(f"need {least} <= n_min <= n_max for {problem}, got {n_min}, {n_max}")
    D = INPUT_DIM[problem]
    rng = np.random.default_rng(seed)
    sizes = rng.integers(n_min, n_max + 1, size=n_examples)  # (N,)
    out: list[Example] = []
    for n in sizes:
        points = rng.random((int(n), D)).astype(np.float32)  # (n, D)
        target = sort_order(points) if problem == "sort" else convex_hull(points)
        out.append((points, target))
    return out


def shoelace_area(polygon: np.ndarray) -> float:
    """Signed area of a polygon by the shoelace formula (Gauss):

        A = ½ Σ_{i=1}^{m} (x_i y_{i+1} − x_{i+1} y_i),   vertex m + 1 = vertex 1

    A > 0 for counter-clockwise vertices, < 0 for clockwise, 0 for fewer than 3.

    Shapes: polygon (m, 2) vertices in order -> float
    """
    p = np.asarray(polygon, dtype=np.float64)
    if p.shape[0] < 3:
        return 0.0
    x, y = p[:, 0], p[:, 1]  # (m,), (m,)
    x_next, y_next = np.roll(x, -1), np.roll(y, -1)  # (m,), (m,)
    return 0.5 * float(np.sum(x * y_next - x_next * y))


def _orient(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Sign of the cross product (b − a) × (c − a): +1 left turn, −1 right, 0 collinear.

    Shapes: a, b, c (..., 2) -> (...,)
    """
    cross = (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (
        c[..., 0] - a[..., 0]
    )  # (...,)
    return np.sign(cross)


def _on_box(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """c lies in the bounding box of segment ab (used when a, b, c are collinear).

    Shapes: a, b, c (..., 2) -> (...,) bool
    """
    lo, hi = np.minimum(a, b), np.maximum(a, b)  # (..., 2)
    return np.all((lo <= c) & (c <= hi), axis=-1)  # (...,)


def segments_intersect(
    p1: np.ndarray, p2: np.ndarray, q1: np.ndarray, q2: np.ndarray
) -> np.ndarray:
    """Closed segments p1p2 and q1q2 share a point (crossing, touching or overlapping).

    Shapes: p1, p2, q1, q2 (..., 2) -> (...,) bool
    """
    o1, o2 = _orient(p1, p2, q1), _orient(p1, p2, q2)  # (...,)
    o3, o4 = _orient(q1, q2, p1), _orient(q1, q2, p2)  # (...,)
    proper = (o1 * o2 < 0) & (o3 * o4 < 0)  # (...,)
    touch = (
        ((o1 == 0) & _on_box(p1, p2, q1))
        | ((o2 == 0) & _on_box(p1, p2, q2))
        | ((o3 == 0) & _on_box(q1, q2, p1))
        | ((o4 == 0) & _on_box(q1, q2, p2))
    )  # (...,)
    return proper | touch


def is_simple_polygon(polygon: np.ndarray) -> bool:
    """A valid polygon: m ≥ 3 distinct vertices, non-zero area, and no two non-adjacent
    edges sharing a point (no self-intersection).

    Shapes: polygon (m, 2) vertices in order -> bool
    """
    p = np.asarray(polygon, dtype=np.float64)
    m = p.shape[0]
    if m < 3 or len({tuple(v) for v in p.tolist()}) < m or shoelace_area(p) == 0.0:
        return False
    start, end = p, np.roll(p, -1, axis=0)  # (m, 2) edge i = p_i → p_{i+1}
    i, j = np.triu_indices(m, k=2)  # (E,), (E,) pairs i < j − 1
    keep = ~((i == 0) & (j == m - 1))  # (E,) the first and the last edge are adjacent
    i, j = i[keep], j[keep]
    if i.size == 0:
        return True
    return not bool(np.any(segments_intersect(start[i], end[i], start[j], end[j])))


def hull_coverage(points: np.ndarray, predicted: np.ndarray, hull: np.ndarray) -> float:
    """area(predicted polygon ∩ true hull) / area(true hull), 0 when the prediction is not a
    simple polygon (index out of range, repeats, crossing edges, fewer than 3 vertices).

    The predicted vertices are input points, so a simple predicted polygon lies inside the
    hull and the ratio is |A(predicted)| / A(hull) (module docstring).

    Shapes: points (n, 2); predicted (m′,) int 0-based; hull (m,) int 0-based -> float in [0, 1]
    """
    pts = np.asarray(points, dtype=np.float64)
    pred = np.asarray(predicted, dtype=np.int64)
    if pred.size and (pred.min() < 0 or pred.max() >= pts.shape[0]):
        return 0.0
    if not is_simple_polygon(pts[pred]):
        return 0.0
    return abs(shoelace_area(pts[pred])) / abs(shoelace_area(pts[np.asarray(hull)]))
