"""The notes' ConvNet and its reusable encoder: convolution is shift-equivariant away from
the borders, max-pooling tolerates small shifts (measured), the region grid is laid out
row-major, every parameter learns, the model rebuilds from its config and trains."""

import pytest
import torch
import torch.nn.functional as F

from seqlab.config import from_dict, to_dict
from seqlab.inspect.vision import pooling_shift_tolerance
from seqlab.models.cnn import ConvEncoder, ConvNet, ConvNetConfig, grid_to_regions
from seqlab.nn.conv import pool2d
from tests.models.vision_data import train_briefly

torch.set_num_threads(1)


@pytest.mark.parametrize(("dy", "dx"), [(1, 0), (0, 2), (-2, 3)])
def test_convolution_is_equivariant_to_shifts_away_from_borders(dy, dx):
    """conv(shift(x)) = shift(conv(x)) at every position whose receptive field (and its
    shifted copy) lies inside the image: the notes' "convolution layers are equivariant"."""
    torch.manual_seed(0)
    enc = ConvEncoder(2, [5], kernel_size=5, pool_size=1).double()  # conv + ReLU, no pooling
    x = torch.randn(3, 2, 20, 20, dtype=torch.float64)
    shift = lambda t: torch.roll(t, (dy, dx), dims=(-2, -1))  # noqa: E731
    y_of_shifted = enc(shift(x))  # (3, 5, 20, 20)
    shifted_y = shift(enc(x))  # (3, 5, 20, 20)
    m = 2 + max(abs(dy), abs(dx))  # kernel radius + shift: untouched by padding or wrap
    inner = (slice(None), slice(None), slice(m, -m), slice(m, -m))
    torch.testing.assert_close(y_of_shifted[inner], shifted_y[inner], atol=1e-12, rtol=0)
    # ... and it really is a border effect: the full maps differ
    assert not torch.allclose(y_of_shifted, shifted_y, atol=1e-6)


def test_pooling_is_equivariant_to_shifts_by_its_stride():
    """A shift by the pool stride p moves the pooled map by exactly one position."""
    z = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    for kind in ("max", "avg"):
        p = pool2d(z, kind, 2)  # (2, 3, 8, 8)
        ps = pool2d(torch.roll(z, 2, dims=-1), kind, 2)
        torch.testing.assert_close(ps[..., 1:], p[..., :-1], atol=0, rtol=0)


def test_max_pooling_tolerates_small_shifts():
    """Measured: shifting i.i.d. maps by one pixel changes (almost) every unpooled value,
    leaves ~1/3 of 2×2 max-pooled outputs unchanged (the theory: the largest of the 6
    cells of old ∪ new window is one of the 2 shared ones, p = 2/6), and ~none of the
    average-pooled ones."""
    z = torch.randn(8, 8, 32, 32, generator=torch.Generator().manual_seed(0))
    mx = pooling_shift_tolerance(z, "max", 2, shift=1)
    av = pooling_shift_tolerance(z, "avg", 2, shift=1)
    assert mx["unpooled"] == 0.0
    assert abs(mx["pooled"] - 1 / 3) < 0.03, mx  # 7,680 windows: s.e. ≈ 0.005
    assert av["pooled"] < 0.01, av
    # a trained-like sparse map (ReLU of a smooth image's conv) shows the same ordering
    torch.manual_seed(0)
    enc = ConvEncoder(1, [8], kernel_size=3, pool_size=1)
    img = F.avg_pool2d(torch.rand(4, 1, 36, 36), 5, 1)  # (4, 1, 32, 32) smooth
    with torch.no_grad():
        a = enc(img)  # (4, 8, 32, 32) rectified maps
    m = pooling_shift_tolerance(a, "max", 2, shift=1)
    assert m["pooled"] > m["unpooled"] + 0.1, m


def test_encoder_grid_and_regions():
    enc = ConvEncoder(3, [4, 6, 8], kernel_size=3, pool="avg", pool_size=2)
    x = torch.randn(2, 3, 29, 17)
    grid = enc(x)  # (2, 8, 3, 2): 29 → 14 → 7 → 3, 17 → 8 → 4 → 2
    assert grid.shape == (2, 8, 3, 2) and enc.grid_size(29, 17) == (3, 2)
    assert enc.out_channels == 8
    reg = enc.regions(x)  # (2, L = 6, D = 8)
    assert reg.shape == (2, 6, 8)
    for l in range(6):  # row-major: region l is grid cell (l // W, l % W)
        torch.testing.assert_close(reg[:, l], grid[:, :, l // 2, l % 2], atol=0, rtol=0)
    torch.testing.assert_close(grid_to_regions(grid), reg, atol=0, rtol=0)
    stages = enc.stages(x)
    assert [s.shape[1:] for s in stages] == [(4, 29, 17), (6, 14, 8), (8, 7, 4), (8, 3, 2)]
    assert all((s >= 0).all() for s in stages[:-1])  # rectified: y = max(z, 0)


def test_encoder_rejects_bad_arguments():
    with pytest.raises(ValueError, match="odd"):
        ConvEncoder(1, [4], kernel_size=4)
    with pytest.raises(ValueError, match="pool"):
        ConvEncoder(1, [4], pool="min")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels"):
        ConvEncoder(1, [])


@pytest.mark.parametrize("pool", ["max", "avg"])
@pytest.mark.parametrize("hidden", [16, None])
def test_convnet_shapes_and_every_parameter_gets_a_gradient(pool, hidden):
    cfg = ConvNetConfig(channels=(4, 6), kernel_size=3, pool=pool, hidden=hidden, dropout=0.1)
    model = ConvNet(cfg, in_channels=1, n_classes=10, image_size=(28, 28))
    x = torch.randn(3, 1, 28, 28)
    logits = model(x)
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    F.cross_entropy(logits, torch.tensor([1, 2, 3])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert (model.fc is None) == (hidden is None)
    names = [n for n, _ in model.feature_maps(x)]
    assert names == ["conv1 + ReLU", "conv2 + ReLU", "pooled output"]


def test_max_and_avg_pool_models_differ_only_in_pooling():
    torch.manual_seed(0)
    a = ConvNet(ConvNetConfig(channels=(4,), kernel_size=3, pool="max", dropout=0.0), 1, 3, (8, 8))
    b = ConvNet(ConvNetConfig(channels=(4,), kernel_size=3, pool="avg", dropout=0.0), 1, 3, (8, 8))
    b.load_state_dict(a.state_dict())  # identical parameters
    x = torch.randn(2, 1, 8, 8)
    h = F.relu(a.encoder.convs[0](x))  # (2, 4, 8, 8)
    a.eval(), b.eval()
    torch.testing.assert_close(a(x), a.out(F.relu(a.fc(F.max_pool2d(h, 2).flatten(1)))))
    torch.testing.assert_close(b(x), b.out(F.relu(b.fc(F.avg_pool2d(h, 2).flatten(1)))))


def test_convnet_rebuilds_from_its_saved_config():
    cfg = ConvNetConfig(channels=(4, 8), kernel_size=3, pool="avg", hidden=12)
    torch.manual_seed(1)
    model = ConvNet(cfg, 1, 10, (8, 8)).eval()
    again = ConvNet(from_dict(ConvNetConfig, to_dict(cfg)), 1, 10, (8, 8)).eval()
    again.load_state_dict(model.state_dict())
    x = torch.randn(4, 1, 8, 8)
    torch.testing.assert_close(again(x), model(x), atol=0, rtol=0)


def test_config_validation():
    for bad in ({"kernel_size": 4}, {"dropout": 1.0}, {"channels": ()}, {"hidden": 0}):
        with pytest.raises(ValueError):
            ConvNetConfig(**bad)


def test_convnet_trains_on_a_tiny_image_set_in_seconds():
    torch.manual_seed(0)
    cfg = ConvNetConfig(channels=(8, 16), kernel_size=3, hidden=32, dropout=0.0)
    model = ConvNet(cfg, 1, 4, (12, 12))
    assert train_briefly(model, steps=60) >= 0.95
