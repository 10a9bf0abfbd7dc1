"""Sentence-classification data: the MR polarity files, ``label<TAB>text`` files, the
contrast set, and the MR protocol's seeded, stratified k-fold split.

MR (Pang & Lee 2005; "MR" in Kim 2014) has no official split: results are 10-fold
cross-validation accuracy. :func:`kfold` deals each class's shuffled examples round-robin
into k folds, so folds are disjoint, cover the data, hold each class in the same
proportion (±1 example) and depend only on ``seed``. Fold k is the test set of run k;
:func:`cv_split` also carves a stratified validation part out of the other k − 1 folds
(for early stopping, as Kim 2014 held out 10 % of the training data).

The MR files are Windows-1252 (see shared/data/README.md §3); every reader here decodes
strictly and reports a bad byte or an empty line as ``file:line: … — what to do``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqlab.data.readers import read_lines, read_polarity
from seqlab.errors import DataError

__all__ = [
    "MR_FILES",
    "ContrastItem",
    "cv_split",
    "holdout",
    "kfold",
    "locate_mr",
    "read_contrast_set",
    "read_label_tsv",
    "read_mr",
]

MR_FILES = ("rt-polarity.pos", "rt-polarity.neg")


def locate_mr(data_dir: str | Path | None) -> Path:
    """The folder holding ``rt-polarity.pos/.neg``: ``data_dir/mr_polarity`` or
    ``data_dir`` itself."""
    if data_dir is None:
        raise DataError(
            "the MR polarity data was not found (no data folder)",
            hint="pass --data-dir (the folder that holds mr_polarity/) or use task.data=tsv",
        )
    root = Path(data_dir)
    for folder in (root / "mr_polarity", root):
        if all((folder / name).is_file() for name in MR_FILES):
            return folder
    raise DataError(
        f"no {MR_FILES[0]} and {MR_FILES[1]} in it or in its mr_polarity/ folder",
        path=root,
        hint="point --data-dir at shared/data (see shared/data/README.md §3)",
    )


def read_mr(folder: str | Path, encoding: str = "cp1252") -> list[tuple[str, str]]:
    """Every MR sentence as ``(text, label)``: the 5,331 ``pos`` lines, then the 5,331
    ``neg`` lines (trailing spaces stripped). Strict ``cp1252``: a byte that is not
    Windows-1252 (0x81, 0x8d, 0x8f, 0x90, 0x9d) or an empty line raises DataError
    naming the file and line."""
    folder = Path(folder)
    return read_polarity(folder / MR_FILES[0], folder / MR_FILES[1], encoding=encoding)


def _tsv_rows(path: str | Path, encoding: str, max_fields: int) -> list[tuple[int, list[str]]]:
    """(line number, fields) of a ``label<TAB>text[<TAB>…]`` file, each field checked."""
    rows = []
    for i, line in enumerate(read_lines(path, encoding=encoding), 1):
        fields = [f.strip() for f in line.split("\t")]
        if not 2 <= len(fields) <= max_fields:
            shape = "label<TAB>text" + ("<TAB>note" if max_fields == 3 else "")
            raise DataError(
                f"found {len(fields)} TAB-separated fields, expected "
                + ("2" if max_fields == 2 else f"2 to {max_fields}")
                + f" ({shape})",
                path=path,
                line=i,
                hint=f"write each line as `{shape}` (replace TABs inside the text by spaces)",
            )
        if not fields[0] or not fields[1]:
            raise DataError(
                f"{'label' if not fields[0] else 'text'} is empty",
                path=path,
                line=i,
                hint="every line needs a label and a text: `label<TAB>text`",
            )
        rows.append((i, fields))
    return rows


def read_label_tsv(path: str | Path, encoding: str = "utf-8") -> list[tuple[str, str]]:
    """A ``label<TAB>text`` file (one example per line, no header) as ``(text, label)``
    pairs, the order :func:`read_mr` uses."""
    return [(f[1], f[0]) for _, f in _tsv_rows(path, encoding, 2)]


@dataclass(frozen=True)
class ContrastItem:
    """One contrast-set sentence: gold ``label``, ``text`` and the ``phenomenon`` it probes
    (negation, contrast, intensifier, …)."""

    label: str
    text: str
    phenomenon: str
    line: int


def read_contrast_set(path: str | Path, encoding: str = "utf-8") -> list[ContrastItem]:
    """A ``label<TAB>text<TAB>phenomenon`` file (the phenomenon may be left out), e.g.
    data/contrast/sentiment.tsv."""
    return [
        ContrastItem(f[0], f[1], f[2] if len(f) == 3 else "", i)
        for i, f in _tsv_rows(path, encoding, 3)
    ]


def kfold(
    labels: Sequence[str] | Sequence[int], n_folds: int = 10, seed: int = 0
) -> list[np.ndarray]:
    """Seeded, stratified k-fold partition of example indices.

    Each class's indices are shuffled (``numpy.random.default_rng(seed)``) and dealt
    round-robin to the folds; the deal of the next class starts where the previous one
    stopped, so fold sizes differ by at most one and each class count per fold by at most
    one. Classes are visited in sorted order, so the result depends only on the labels and
    ``seed``.

    Returns: ``n_folds`` sorted int64 arrays, pairwise disjoint, whose union is
    ``range(len(labels))``.
    """
    n = len(labels)
    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    if n < n_folds:
        raise DataError(f"{n} examples cannot fill {n_folds} folds", hint="use fewer folds")
    rng = np.random.default_rng(seed)
    y = np.asarray([str(v) for v in labels])
    fold_of = np.empty(n, dtype=np.int64)  # (N,)
    start = 0
    for label in sorted(set(y.tolist())):
        members = rng.permutation(np.flatnonzero(y == label))  # (N_c,)
        fold_of[members] = (start + np.arange(len(members))) % n_folds
        start = (start + len(members)) % n_folds
    return [np.flatnonzero(fold_of == k) for k in range(n_folds)]


def cv_split(
    labels: Sequence[str] | Sequence[int],
    fold: int,
    n_folds: int = 10,
    seed: int = 0,
    valid_fraction: float = 0.1,
) -> dict[str, np.ndarray]:
    """Run ``fold`` of the k-fold protocol: ``test`` = fold ``fold``; ``valid`` = a
    stratified ``valid_fraction`` of the rest (drawn with ``seed``), ``train`` = the
    remainder. Three disjoint sorted index arrays covering every example."""
    if not 0 <= fold < n_folds:
        raise ValueError(f"fold must be in [0, {n_folds}), got {fold}")
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in [0, 1), got {valid_fraction}")
    folds = kfold(labels, n_folds, seed)
    test = folds[fold]
    rest = np.sort(np.concatenate([f for k, f in enumerate(folds) if k != fold]))  # (N_r,)
    return {"test": test, **holdout(labels, rest, valid_fraction, seed)}


def holdout(
    labels: Sequence[str] | Sequence[int],
    indices: np.ndarray,
    valid_fraction: float,
    seed: int,
) -> dict[str, np.ndarray]:
    """Split ``indices`` into ``train`` and a stratified ``valid`` part of about
    ``valid_fraction`` (round(fraction · class count) of each class, at least one example
    when the fraction is positive)."""
    rng = np.random.default_rng([seed, 1])  # a stream independent of the fold shuffle
    y = np.asarray([str(labels[i]) for i in indices])
    valid = []
    for label in sorted(set(y.tolist())):
        members = rng.permutation(indices[y == label])
        k = round(valid_fraction * len(members))
        k = max(k, 1) if valid_fraction > 0 and len(members) > 1 else k
        valid.append(members[:k])
    chosen = np.sort(np.concatenate(valid)) if valid else np.empty(0, dtype=np.int64)
    train = np.setdiff1d(indices, chosen)
    return {"train": train, "valid": chosen.astype(np.int64)}
