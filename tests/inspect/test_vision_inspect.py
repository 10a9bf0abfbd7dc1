"""seqlab.inspect.vision: the notes' kernels (numbers and what they do), their application
by convolution, the pooling shift measurement, and the PNG figures."""

import pytest
import torch

from seqlab import api
from seqlab.inspect.vision import (
    apply_kernels,
    first_conv,
    main,
    named_kernels,
    plot_feature_maps,
    plot_filters,
    pooling_shift_tolerance,
)
from seqlab.models.cnn import ConvNet, ConvNetConfig
from seqlab.models.resnet import ResNet, ResNetConfig
from seqlab.nn.conv import convolve2d
from tests.models.vision_data import write_quadrant_mnist

torch.set_num_threads(1)
PNG = b"\x89PNG\r\n\x1a\n"


def test_kernels_are_the_notes_numbers():
    k = named_kernels()
    assert k["blur"].tolist() == [[0, 1, 0], [1, 4, 1], [0, 1, 0]]
    assert k["sharpen"].tolist() == [[0, -1, 0], [-1, 8, -1], [0, -1, 0]]
    assert k["edge"].tolist() == [[0, -1, 0], [-1, 4, -1], [0, -1, 0]]
    assert k["sobel_x"].tolist() == [[1, 0, -1], [2, 0, -2], [1, 0, -1]]
    assert k["sobel_y"].tolist() == [[1, 2, 1], [0, 0, 0], [-1, -2, -1]]


def test_apply_is_the_notes_convolution_cropped_to_the_image():
    """Same-size output = the centre of the full maths convolution A ∗ K (notes 004), and
    the notes' own 3×3 example image through a 2×2 kernel of that example."""
    img = torch.randn(7, 9)
    out = apply_kernels(img)
    for name, k in named_kernels().items():
        assert out[name].shape == (7, 9)
        torch.testing.assert_close(out[name], convolve2d(img, k)[1:-1, 1:-1], atol=1e-6, rtol=0)
    # flipped kernel: sobel_x as a maths convolution is −(sobel_x as a cross-correlation)
    xc = torch.nn.functional.conv2d(
        img[None, None], named_kernels()["sobel_x"][None, None], padding=1
    )
    torch.testing.assert_close(out["sobel_x"], -xc[0, 0], atol=1e-5, rtol=0)


def test_what_the_kernels_do():
    flat = torch.full((8, 8), 0.5)
    out = apply_kernels(flat)
    inner = (slice(1, -1), slice(1, -1))
    torch.testing.assert_close(out["edge"][inner], torch.zeros(6, 6), atol=1e-6, rtol=0)  # Σ = 0
    torch.testing.assert_close(out["blur"][inner], torch.full((6, 6), 4.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(out["sharpen"][inner], torch.full((6, 6), 2.0), atol=1e-6, rtol=0)
    step = torch.zeros(8, 8)
    step[:, 4:] = 1.0  # a vertical edge between columns 3 and 4
    out = apply_kernels(step)
    sx, sy = out["sobel_x"][1:-1], out["sobel_y"][1:-1]  # rows away from the top/bottom border
    assert (sx[:, 3:5].abs() == 4).all()  # responds at the two columns beside the edge
    assert (sx[:, [0, 1, 2, 5, 6]] == 0).all()  # and nowhere else inside
    assert (sy[:, :-1] == 0).all()  # sobel_y ignores a vertical edge


def test_pooling_shift_tolerance_on_spikes_inside_their_windows():
    """Spikes on the even columns moved one pixel right stay in their 2×2 pooling
    window: every max-pooled output is unchanged, every unpooled value changed."""
    z = torch.zeros(2, 3, 8, 8)
    z[..., 0::2] = torch.rand(2, 3, 8, 4) + 0.5  # spikes at columns 0, 2, 4, 6
    r = pooling_shift_tolerance(z, "max", 2, shift=1)
    assert r == {"unpooled": 0.0, "pooled": 1.0}
    r = pooling_shift_tolerance(z, "max", 2, shift=2)  # into the next window: changed
    assert r["pooled"] < 1.0


def test_figures_are_written(tmp_path):
    torch.manual_seed(0)
    cnn = ConvNet(ConvNetConfig(channels=(6, 8), kernel_size=3, hidden=8), 1, 10, (12, 12))
    res = ResNet(ResNetConfig(depth=8, widths=(4, 8, 8)), 1, 10, (12, 12))
    assert first_conv(cnn) is cnn.encoder.convs[0] and first_conv(res) is res.conv1
    image = torch.rand(1, 12, 12)
    paths = [
        plot_filters(res, tmp_path / "r" / "f.png"),
        plot_feature_maps(res, image, tmp_path / "rm.png", max_maps=4, label="(3)"),
    ]
    for p in paths:
        assert p.read_bytes()[:8] == PNG
    assert res.training  # restored after plotting
    with pytest.raises(ValueError, match="no Conv2d"):
        first_conv(torch.nn.Linear(2, 2))


def test_main_writes_the_three_pngs_for_a_run(tmp_path, capsys):
    write_quadrant_mnist(tmp_path / "data", n=40)
    config = {
        "task": {"name": "image_classify", "data": "mnist"},
        "model": {"name": "convnet", "channels": [4, 4], "kernel_size": 3, "hidden": 8},
        "train": {
            "max_steps": 2,
            "precision": "fp32",
            "threads": 1,
            "progress": False,
            "valid_every": 2,
            "save_every": 2,
            "batch": {"max_tokens": 8, "max_sentences": 8, "max_len": 1},
        },
    }
    api.train(config, run_dir=tmp_path / "run", data_dir=tmp_path / "data", quiet=True)
    out = tmp_path / "figs"
    argv = [str(tmp_path / "run"), "--out", str(out), "--data-dir", str(tmp_path / "data")]
    assert main([*argv, "--index", "1"]) == 0
    for name in ("filters.png", "feature-maps.png", "kernels.png"):
        assert (out / name).read_bytes()[:8] == PNG
    assert str(out / "kernels.png") in capsys.readouterr().out
