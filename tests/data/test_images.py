"""IDX reader (magic numbers, dimensions, truncated / over-long / corrupt files refused with
the file named), the MNIST loader and its fixed 8,000 / 2,000 split, the digits loader."""

import gzip

import numpy as np
import pytest
import torch

from seqlab.data.images import (
    MNIST_FILES,
    load_digits,
    load_mnist,
    locate_mnist,
    mnist_split,
    read_idx,
    read_mnist_images,
    read_mnist_labels,
    write_idx,
)
from seqlab.errors import DataError

torch.set_num_threads(1)


def fake_mnist(folder, n=30, size=28, compress=True, seed=0):
    """Tiny MNIST-format files: (n, size, size) uint8 images and labels 0–9."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    images = rng.integers(0, 256, (n, size, size), dtype=np.uint8)
    labels = (np.arange(n) % 10).astype(np.uint8)
    suffix = ".gz" if compress else ""
    write_idx(folder / f"{MNIST_FILES[0]}{suffix}", images, compress)
    write_idx(folder / f"{MNIST_FILES[1]}{suffix}", labels, compress)
    return images, labels


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_round_trip(tmp_path, compress, dtype):
    arr = (np.arange(2 * 3 * 4) - 7).reshape(2, 3, 4).astype(dtype)
    if dtype == np.uint8:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / "a.idx", arr, compress)
    back = read_idx(path)
    assert back.dtype == arr.dtype and back.shape == (2, 3, 4)
    np.testing.assert_array_equal(back, arr)  # exact
    assert back.flags.writeable


def test_idx_header_is_big_endian_mnist_layout(tmp_path):
    path = write_idx(tmp_path / "img", np.zeros((2, 28, 28), dtype=np.uint8))
    raw = path.read_bytes()
    assert raw[:4] == bytes.fromhex("00000803")  # MNIST images magic
    assert raw[4:16] == bytes.fromhex("000000020000001c0000001c")
    assert len(raw) == 16 + 2 * 784


def test_truncated_files_are_refused(tmp_path):
    good = write_idx(tmp_path / "img", np.ones((3, 4, 4), dtype=np.uint8)).read_bytes()
    cases = {
        "data": good[:-5],  # last 5 pixels missing
        "header": good[:10],  # 3 dimensions need 16 header bytes
        "magic": good[:3],
    }
    for name, raw in cases.items():
        path = tmp_path / f"cut-{name}"
        path.write_bytes(raw)
        with pytest.raises(DataError, match="truncated") as info:
            read_idx(path)
        assert str(path) in str(info.value)  # the error names the file
    path = tmp_path / "cut-data"
    with pytest.raises(DataError, match=r"need 48 data bytes, the file has 43"):
        read_idx(path)


def test_truncated_gzip_and_trailing_bytes_are_refused(tmp_path):
    body = write_idx(tmp_path / "img", np.ones((3, 4, 4), dtype=np.uint8)).read_bytes()
    gz = gzip.compress(body, mtime=0)
    (tmp_path / "cut.gz").write_bytes(gz[: len(gz) // 2])
    with pytest.raises(DataError, match="gzip") as info:
        read_idx(tmp_path / "cut.gz")
    assert "cut.gz" in str(info.value)
    (tmp_path / "long").write_bytes(body + b"\x00")
    with pytest.raises(DataError, match="trailing bytes"):
        read_idx(tmp_path / "long")


def test_bad_magic_numbers_are_refused(tmp_path):
    body = write_idx(tmp_path / "img", np.ones((3, 4, 4), dtype=np.uint8)).read_bytes()
    for name, magic in {"nonzero": b"\x01\x00\x08\x03", "type": b"\x00\x00\x07\x03"}.items():
        path = tmp_path / name
        path.write_bytes(magic + body[4:])
        with pytest.raises(DataError, match="bad IDX magic number"):
            read_idx(path)
    (tmp_path / "text").write_bytes(b"hello, world, not an IDX file")
    with pytest.raises(DataError, match="bad IDX magic"):
        read_idx(tmp_path / "text")
    labels = write_idx(tmp_path / "labels", np.zeros(3, dtype=np.uint8))
    with pytest.raises(DataError, match="expected 0x00000803"):
        read_mnist_images(labels)  # images and labels swapped
    with pytest.raises(DataError, match="expected 0x00000801"):
        read_mnist_labels(tmp_path / "img")
    zero = tmp_path / "zero"
    zero.write_bytes(bytes.fromhex("00000802") + bytes.fromhex("00000000") * 2)
    with pytest.raises(DataError, match="zero"):
        read_idx(zero)


def test_labels_must_be_digits(tmp_path):
    path = write_idx(tmp_path / "labels", np.array([1, 2, 10], dtype=np.uint8))
    with pytest.raises(DataError, match="label 10 at item 2"):
        read_mnist_labels(path)


def test_load_mnist(tmp_path):
    images, labels = fake_mnist(tmp_path / "mnist", n=30)
    data = load_mnist(tmp_path)
    assert data.images.shape == (30, 28, 28) and data.images.dtype == np.float32
    np.testing.assert_allclose(data.images, images / 255.0, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(data.labels, labels)
    assert data.labels.dtype == np.int64
    # uncompressed files directly in the folder are found too
    fake_mnist(tmp_path / "plain", n=10, compress=False)
    assert load_mnist(tmp_path / "plain").images.shape == (10, 28, 28)


def test_mnist_errors_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="no data folder"):
        locate_mnist(None)
    with pytest.raises(DataError, match="README.md §7"):
        locate_mnist(tmp_path)
    fake_mnist(tmp_path / "mnist", n=30)
    write_idx(tmp_path / "mnist" / f"{MNIST_FILES[1]}.gz", np.zeros(29, np.uint8), True)
    with pytest.raises(DataError, match="30 images but 29 labels"):
        load_mnist(tmp_path)


def test_mnist_split_is_the_fixed_8000_2000_rule():
    s = mnist_split(10_000)
    assert len(s["train"]) == 8000 and len(s["test"]) == 2000
    both = np.concatenate([s["train"], s["test"]])
    assert len(np.unique(both)) == 10_000  # disjoint and covering
    perm = np.random.default_rng(0).permutation(10_000)
    np.testing.assert_array_equal(s["test"], np.sort(perm[:2000]))  # the documented rule
    again = mnist_split(10_000)
    np.testing.assert_array_equal(again["test"], s["test"])
    other = mnist_split(10_000, seed=1)
    assert not np.array_equal(other["test"], s["test"])
    assert len(mnist_split(30)["test"]) == 6
    with pytest.raises(ValueError):
        mnist_split(10, test_fraction=1.0)


def test_load_digits():
    d = load_digits()
    assert d.images.shape == (1797, 8, 8) and d.images.dtype == np.float32
    assert d.images.min() == 0.0 and d.images.max() == 1.0  # 0–16 scaled by 1/16
    assert sorted(np.unique(d.labels).tolist()) == list(range(10))
