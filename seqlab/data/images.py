"""Image data: a validating IDX reader, the MNIST test set with seqlab's fixed 8,000 / 2,000
split, and scikit-learn's 8×8 digits with a 5-fold split.

IDX (LeCun et al., the MNIST file format; big-endian)::

    magic   = 0x00 0x00 <type> <ndim>     type 0x08 uint8, 0x09 int8, 0x0B int16,
                                          0x0C int32, 0x0D float32, 0x0E float64
    dims    = ndim × uint32               e.g. 10000, 28, 28
    data    = Π dims values of <type>, row-major

MNIST images are magic ``0x00000803`` (uint8, 3-D), labels ``0x00000801`` (uint8, 1-D).
:func:`read_idx` checks the magic, the dimensions and that the file holds exactly
Π dims values: a truncated (or over-long, or corrupt gzip) file is refused with a
:class:`~seqlab.errors.DataError` naming the file, what was expected and what was found.

**Not the standard split.** Only the 10,000-image MNIST *test* set ships with seqlab
(shared/data/README.md §7), so :func:`mnist_split` divides it by a fixed seeded rule:
``numpy.random.default_rng(seed).permutation(N)``, the first round(test_fraction · N)
indices (sorted) are the test set, the rest train — 8,000 / 2,000 with the defaults
(seed 0, fraction 0.2). Numbers on it are not comparable with the standard 60k/10k
MNIST benchmark.

Digits: scikit-learn's ``load_digits`` (1,797 images, 8×8, values 0–16; the UCI
optical-recognition test set) split by :func:`seqlab.data.mr.cv_split` (seeded,
stratified k-fold, fold k = test, a stratified part of the rest = validation).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqlab.errors import DataError

__all__ = [
    "IDX_TYPES",
    "MNIST_FILES",
    "MNIST_IMAGES_MAGIC",
    "MNIST_LABELS_MAGIC",
    "ImageSet",
    "load_digits",
    "load_mnist",
    "locate_mnist",
    "mnist_split",
    "read_idx",
    "read_mnist_images",
    "read_mnist_labels",
    "write_idx",
]

# IDX type byte → NumPy dtype (big-endian, as the format stores it).
IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
MNIST_IMAGES_MAGIC = 0x00000803
MNIST_LABELS_MAGIC = 0x00000801
MNIST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class ImageSet:
    """Images and labels held in memory.

    Shapes:
        images: (N, H, W) float32 in [0, 1] (grey-scale)
        labels: (N,) int64 class ids 0 … n_classes − 1
    """

    images: np.ndarray
    labels: np.ndarray
    source: str


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is a gzip file (by its magic, not its name)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError("no such file", path=path) from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:  # truncated or corrupt gzip stream
        raise DataError(
            f"not a readable gzip file ({exc})",
            path=path,
            hint="the download is incomplete or corrupt: fetch the file again",
        ) from None


def read_idx(path: str | Path, expect_magic: int | None = None) -> np.ndarray:
    """Read an IDX file (plain or gzipped) into a native-endian array of shape ``dims``.

    Raises:
        DataError: the file is missing, shorter than its header, has a bad magic number
            (first two bytes not zero, unknown type byte, ndim 0, or not ``expect_magic``),
            a zero dimension, or a data part that is not exactly Π dims values (truncated
            or trailing bytes).
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DataError(
            f"truncated: {len(data)} bytes, shorter than the 4-byte IDX magic number",
            path=path,
        )
    magic = int.from_bytes(data[:4], "big")
    zero, code, ndim = int.from_bytes(data[:2], "big"), data[2], data[3]
    if zero != 0 or code not in IDX_TYPES or ndim == 0:
        raise DataError(
            f"bad IDX magic number 0x{magic:08X} (expected 0x0000TTNN with type TT in "
            f"{', '.join(f'0x{t:02X}' for t in IDX_TYPES)} and NN ≥ 1 dimensions)",
            path=path,
            hint="this is not an IDX file (or not the file you meant)",
        )
    if expect_magic is not None and magic != expect_magic:
        raise DataError(
            f"IDX magic number 0x{magic:08X}, expected 0x{expect_magic:08X}",
            path=path,
            hint="images and labels files swapped, or a different dataset",
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(
            f"truncated: {len(data)} bytes, the header of {ndim} dimensions needs {header}",
            path=path,
        )
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if 0 in dims:
        raise DataError(f"IDX dimensions {dims} contain a zero", path=path)
    dtype = IDX_TYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(data) - header
    if found != expected:
        what = "truncated" if found < expected else "trailing bytes"
        raise DataError(
            f"{what}: dimensions {dims} need {expected} data bytes, the file has {found}",
            path=path,
            hint="the file is incomplete or corrupt: fetch it again",
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)  # dims, e.g. (N, H, W)
    return arr.astype(dtype.newbyteorder("="))  # native-endian copy (writable)


def write_idx(path: str | Path, arr: np.ndarray, compress: bool = False) -> Path:
    """Write ``arr`` as an IDX file (the inverse of :func:`read_idx`; used by the tests)."""
    arr = np.asarray(arr)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}
    code = codes.get(arr.dtype.newbyteorder("="))
    if code is None or arr.ndim == 0:
        raise ValueError(f"IDX cannot store a {arr.ndim}-D {arr.dtype} array")
    header = bytes([0, 0, code, arr.ndim]) + b"".join(d.to_bytes(4, "big") for d in arr.shape)
    body = header + arr.astype(IDX_TYPES[code]).tobytes()
    path = Path(path)
    path.write_bytes(gzip.compress(body, mtime=0) if compress else body)
    return path


def read_mnist_images(path: str | Path) -> np.ndarray:
    """MNIST images: magic 0x00000803, (N, H, W) uint8 (0 = background)."""
    return read_idx(path, MNIST_IMAGES_MAGIC)


def read_mnist_labels(path: str | Path, n_classes: int = 10) -> np.ndarray:
    """MNIST labels: magic 0x00000801, (N,) uint8 in 0 … n_classes − 1, as int64."""
    labels = read_idx(path, MNIST_LABELS_MAGIC)
    bad = np.flatnonzero(labels >= n_classes)
    if bad.size:
        raise DataError(
            f"label {int(labels[bad[0]])} at item {int(bad[0])} is not a digit 0–{n_classes - 1}",
            path=path,
        )
    return labels.astype(np.int64)


def locate_mnist(data_dir: str | Path | None) -> tuple[Path, Path]:
    """(images, labels) files in ``data_dir/mnist`` or ``data_dir``, ``.gz`` or not."""
    hint = "pass --data-dir (the folder that holds mnist/, see shared/data/README.md §7)"
    if data_dir is None:
        raise DataError("the MNIST files were not found (no data folder)", hint=hint)
    root = Path(data_dir)
    for folder in (root / "mnist", root):
        found = []
        for name in MNIST_FILES:
            found += [p for p in (folder / f"{name}.gz", folder / name) if p.is_file()][:1]
        if len(found) == 2:
            return found[0], found[1]
    raise DataError(
        f"no {MNIST_FILES[0]}[.gz] and {MNIST_FILES[1]}[.gz] in it or in its mnist/ folder",
        path=root,
        hint=hint,
    )


def load_mnist(data_dir: str | Path | None) -> ImageSet:
    """The MNIST test set: images scaled to [0, 1] (pixel / 255) and labels, checked to
    agree in count."""
    images_path, labels_path = locate_mnist(data_dir)
    images = read_mnist_images(images_path)
    labels = read_mnist_labels(labels_path)
    if images.ndim != 3:
        raise DataError(f"images must be (N, H, W), got {images.shape}", path=images_path)
    if len(images) != len(labels):
        raise DataError(
            f"{len(images)} images but {len(labels)} labels in {labels_path.name}",
            path=images_path,
            hint="the two files must come from the same MNIST set",
        )
    scaled = images.astype(np.float32) / 255.0  # (N, H, W)
    return ImageSet(scaled, labels, str(images_path))


def mnist_split(n: int, seed: int = 0, test_fraction: float = 0.2) -> dict[str, np.ndarray]:
    """seqlab's fixed split of the MNIST test set (NOT the standard MNIST split).

    ``perm = numpy.random.default_rng(seed).permutation(n)``; ``test`` = the first
    round(test_fraction · n) entries of perm, ``train`` = the rest, each sorted.
    n = 10,000, seed 0, fraction 0.2 → 8,000 train / 2,000 test.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    perm = np.random.default_rng(seed).permutation(n)  # (N,)
    n_test = round(test_fraction * n)
    if not 0 < n_test < n:
        raise DataError(f"{n} images cannot be split into train and test parts")
    return {"train": np.sort(perm[n_test:]), "test": np.sort(perm[:n_test])}


def load_digits() -> ImageSet:
    """scikit-learn's 8×8 digits (bundled with scikit-learn; no download), scaled to
    [0, 1] (value / 16)."""
    from sklearn.datasets import load_digits as sk_load_digits

    d = sk_load_digits()
    images = (np.asarray(d.images, dtype=np.float32) / 16.0).astype(np.float32)  # (N, 8, 8)
    return ImageSet(images, np.asarray(d.target, dtype=np.int64), "sklearn.datasets.load_digits")
