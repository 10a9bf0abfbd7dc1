"""CIFAR ResNets (He 2016 §4.2) and their plain twins: torchvision parameter names, the
paper's parameter counts, identical parameters in the plain twin, option-A shortcuts,
zeroed residual branches give the identity through every block, gradients, training."""

import re

import pytest
import torch
import torch.nn.functional as F

from seqlab.config import from_dict, to_dict
from seqlab.models.resnet import CifarBasicBlock, ResNet, ResNetConfig, option_a_shortcut
from tests.models.vision_data import train_briefly

torch.set_num_threads(1)

# torchvision.models.resnet naming: stem conv1/bn1, layer{1..4}.{i}.{conv1,bn1,conv2,bn2,
# downsample.0,downsample.1}, fc; BN buffers running_mean/var and num_batches_tracked.
TORCHVISION_KEY = re.compile(
    r"^(conv1\.weight|bn1\.\w+|fc\.(weight|bias)"
    r"|layer[1-4]\.\d+\.(conv[12]\.weight|bn[12]\.\w+|downsample\.0\.weight|downsample\.1\.\w+))$"
)
BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def build(depth=8, plain=False, in_channels=1, n_classes=10, **kw):
    return ResNet(ResNetConfig(depth=depth, plain=plain, **kw), in_channels, n_classes)


def test_state_dict_keys_follow_torchvision_names():
    expected = ["conv1.weight", *(f"bn1.{b}" for b in BN)]
    for stage in (1, 2, 3):  # ResNet-8: one block per stage
        for conv in (1, 2):
            expected += [f"layer{stage}.0.conv{conv}.weight"]
            expected += [f"layer{stage}.0.bn{conv}.{b}" for b in BN]
    expected += ["fc.weight", "fc.bias"]
    assert list(build(8).state_dict()) == expected
    keys = list(build(20).state_dict())
    assert all(TORCHVISION_KEY.match(k) for k in keys), [
        k for k in keys if not TORCHVISION_KEY.match(k)
    ]
    assert "layer3.2.bn2.running_var" in keys and not any("downsample" in k for k in keys)
    shapes = {k: tuple(v.shape) for k, v in build(20).state_dict().items()}
    assert shapes["conv1.weight"] == (16, 1, 3, 3)
    assert shapes["layer2.0.conv1.weight"] == (32, 16, 3, 3)  # stride-2 conv widens
    assert shapes["layer3.2.conv2.weight"] == (64, 64, 3, 3)
    assert shapes["fc.weight"] == (10, 64)


@pytest.mark.parametrize(("depth", "millions"), [(20, 0.27), (32, 0.46), (56, 0.85)])
def test_parameter_counts_match_he_2016_table_6(depth, millions):
    """He 2016 Table 6 (CIFAR-10, 3 input channels): 0.27M, 0.46M, 0.85M."""
    n = sum(p.numel() for p in build(depth, in_channels=3).parameters())
    assert round(n / 1e6, 2) == millions
    assert len(build(depth).blocks()) == 3 * (depth - 2) // 6


@pytest.mark.parametrize("depth", [20, 56])
def test_plain_twin_has_exactly_the_same_parameters(depth):
    res, plain = build(depth), build(depth, plain=True)
    assert [(k, v.shape) for k, v in res.state_dict().items()] == [
        (k, v.shape) for k, v in plain.state_dict().items()
    ]
    plain.load_state_dict(res.state_dict())  # strict: names and shapes interchange
    x = torch.randn(2, 1, 12, 12)
    res.eval(), plain.eval()
    assert not torch.allclose(res(x), plain(x))  # ... and only the shortcuts differ


def test_option_a_shortcut():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).reshape(2, 3, 5, 5)
    torch.testing.assert_close(option_a_shortcut(x, 3, 1), x, atol=0, rtol=0)
    s = option_a_shortcut(x, 7, 2)  # (2, 7, 3, 3)
    assert s.shape == (2, 7, 3, 3)
    torch.testing.assert_close(s[:, :3], x[:, :, ::2, ::2], atol=0, rtol=0)
    assert (s[:, 3:] == 0).all()
    with pytest.raises(ValueError):
        option_a_shortcut(x, 2, 1)


def zero_residual_branches(model):
    """F(x) = bn2(·) = 0·x̂ + 0 in every block."""
    with torch.no_grad():
        for block in model.blocks():
            block.bn2.weight.zero_()
            block.bn2.bias.zero_()


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_zeroed_residual_branches_make_every_block_the_identity(mode):
    """Notes 001: with F(x) = 0 "it passes x straight through unmodified". Each block
    gets a non-negative input (every block input is a ReLU output), so
    y = ReLU(0 + x) = x exactly for blocks that keep their shape; for the two
    downsampling blocks (option A) y = [x[:, :, ::2, ::2] ; 0]: the identity on every
    second pixel of the old channels, zeros in the new ones. The plain twin, given the
    same zeroed branches, passes nothing (y = ReLU(0) = 0)."""
    torch.manual_seed(0)
    model = build(20).train(mode == "train")
    plain = build(20, plain=True).train(mode == "train")
    zero_residual_branches(model)
    zero_residual_branches(plain)
    h = torch.relu(torch.randn(4, 16, 12, 12))  # a stem output: non-negative
    h0 = h
    for block in model.blocks():
        y = block(h)
        if block.stride == 1 and y.shape == h.shape:
            torch.testing.assert_close(y, h, atol=0, rtol=0)  # exactly the identity
        else:
            c = h.shape[1]
            torch.testing.assert_close(y[:, :c], h[:, :, ::2, ::2], atol=0, rtol=0)
            assert (y[:, c:] == 0).all()
        h = y
    # the whole stack: the stem output subsampled twice, channels 16 → 64 padded with 0
    expect = option_a_shortcut(option_a_shortcut(h0, 32, 2), 64, 2)  # (4, 64, 3, 3)
    torch.testing.assert_close(h, expect, atol=0, rtol=0)
    stack = torch.nn.Sequential(plain.layer1, plain.layer2, plain.layer3)
    assert (stack(h0) == 0).all()


def test_zeroed_branch_passes_the_gradient_unchanged():
    """x̄⁽ℓ⁾ = x̄⁽ℓ⁺¹⁾ (I + ∂F/∂x) with ∂F/∂x = 0 (notes 001): the gradient through a
    shape-keeping block is the upstream gradient (at positive inputs)."""
    block = CifarBasicBlock(8, 8, 1)
    with torch.no_grad():
        block.bn2.weight.zero_()
        block.bn2.bias.zero_()
    x = (torch.rand(2, 8, 6, 6) + 0.1).requires_grad_()
    g = torch.randn(2, 8, 6, 6)
    (block(x) * g).sum().backward()
    torch.testing.assert_close(x.grad, g, atol=0, rtol=0)


@pytest.mark.parametrize("plain", [False, True])
def test_forward_shapes_and_every_parameter_gets_a_gradient(plain):
    model = build(8, plain=plain)
    x = torch.randn(3, 1, 7, 7)  # odd size: 7 → 4 → 2
    maps = model.feature_maps(x)
    assert [tuple(m.shape[1:]) for _, m in maps] == [(16, 7, 7), (16, 7, 7), (32, 4, 4), (64, 2, 2)]
    logits = model(x)
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    F.cross_entropy(logits, torch.tensor([0, 1, 2])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_rebuilds_from_its_saved_config():
    cfg = ResNetConfig(depth=14, widths=(4, 8, 8), plain=True)
    model = ResNet(cfg, 1, 5, (10, 10)).eval()
    again = ResNet(from_dict(ResNetConfig, to_dict(cfg)), 1, 5, (10, 10)).eval()
    again.load_state_dict(model.state_dict())
    x = torch.randn(2, 1, 10, 10)
    torch.testing.assert_close(again(x), model(x), atol=0, rtol=0)


def test_zero_init_residual_starts_every_block_at_its_shortcut():
    model = build(8, zero_init_residual=True)
    assert all((b.bn2.weight == 0).all() for b in model.blocks())


def test_config_validation():
    for bad in ({"depth": 21}, {"depth": 2}, {"widths": (16, 32)}, {"widths": (32, 16, 64)}):
        with pytest.raises(ValueError):
            ResNetConfig(**bad)
    assert ResNetConfig(depth=56).n == 9


@pytest.mark.parametrize("plain", [False, True])
def test_trains_on_a_tiny_image_set_in_seconds(plain):
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(depth=8, widths=(8, 16, 16), plain=plain), 1, 4, (12, 12))
    assert train_briefly(model, steps=40) >= 0.95
