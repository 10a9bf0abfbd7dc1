"""Residual blocks: the notes' MLP block (001) and the ResNet basic block (He 2016)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqlab.nn.residual import BasicBlock, ResidualMLPBlock

D64 = torch.float64

# torchvision.models.resnet.BasicBlock(...).state_dict().keys(), in order (torchvision is
# not a dependency; these names are what lets weights interchange).
TV_KEYS = [
    "conv1.weight",
    "bn1.weight",
    "bn1.bias",
    "bn1.running_mean",
    "bn1.running_var",
    "bn1.num_batches_tracked",
    "conv2.weight",
    "bn2.weight",
    "bn2.bias",
    "bn2.running_mean",
    "bn2.running_var",
    "bn2.num_batches_tracked",
]
TV_DOWNSAMPLE_KEYS = [
    "downsample.0.weight",
    "downsample.1.weight",
    "downsample.1.bias",
    "downsample.1.running_mean",
    "downsample.1.running_var",
    "downsample.1.num_batches_tracked",
]


# --- MLP block ---------------------------------------------------------------------------


@pytest.mark.parametrize("post_activation", [False, True])
def test_mlp_block_formula(post_activation):
    block = ResidualMLPBlock(5, 7, post_activation).double()
    x = torch.randn(3, 4, 5, dtype=D64)
    W1, b1 = block.W_1.weight, block.W_1.bias
    W2, b2 = block.W_2.weight, block.W_2.bias
    z = x @ W1.T + b1  # z = W⁽¹⁾x + b⁽¹⁾
    h = torch.relu(z)  # h = φ(z)
    y = x + h @ W2.T + b2  # y = x + W⁽²⁾h (+ b⁽²⁾)
    expected = torch.relu(y) if post_activation else y
    out = block(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_mlp_block_identity_when_residual_zero():
    block = ResidualMLPBlock(4, 6).double()
    with torch.no_grad():
        block.W_2.weight.zero_()
        block.W_2.bias.zero_()
    x = torch.randn(3, 4, dtype=D64)
    torch.testing.assert_close(block(x), x, atol=0, rtol=0)  # F(x) = 0 → identity (notes)
    block.post_activation = True
    torch.testing.assert_close(block(x), torch.relu(x), atol=0, rtol=0)  # g(0 + a[l])


def test_mlp_block_jacobian_is_identity_plus_dF_dx():
    block = ResidualMLPBlock(4, 6).double()
    x = torch.randn(4, dtype=D64)
    J = torch.autograd.functional.jacobian(block, x)  # (D, D)
    z = block.W_1(x)
    dF_dx = block.W_2.weight @ torch.diag((z > 0).to(D64)) @ block.W_1.weight  # W⁽²⁾ φ′(z) W⁽¹⁾
    torch.testing.assert_close(J, torch.eye(4, dtype=D64) + dF_dx, atol=1e-12, rtol=0)


@pytest.mark.parametrize("post_activation", [False, True])
def test_mlp_block_gradcheck(post_activation):
    block = ResidualMLPBlock(3, 5, post_activation).double()
    x = torch.randn(2, 3, dtype=D64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))


# --- ResNet basic block -----------------------------------------------------------------


@pytest.mark.parametrize(
    "in_ch, out_ch, stride, projection",
    [(4, 4, 1, False), (4, 8, 1, True), (4, 4, 2, True), (4, 8, 2, True)],
)
def test_basic_block_shapes_and_torchvision_keys(in_ch, out_ch, stride, projection):
    block = BasicBlock(in_ch, out_ch, stride)
    y = block(torch.randn(2, in_ch, 7, 6))
    assert y.shape == (2, out_ch, (7 - 1) // stride + 1, (6 - 1) // stride + 1)
    sd = block.state_dict()
    assert list(sd) == TV_KEYS + (TV_DOWNSAMPLE_KEYS if projection else [])
    assert sd["conv1.weight"].shape == (out_ch, in_ch, 3, 3)
    assert sd["conv2.weight"].shape == (out_ch, out_ch, 3, 3)
    if projection:
        assert sd["downsample.0.weight"].shape == (out_ch, in_ch, 1, 1)
        assert sd["downsample.1.running_var"].shape == (out_ch,)
    # a state dict with exactly these keys loads strictly into a fresh block
    BasicBlock(in_ch, out_ch, stride).load_state_dict(sd, strict=True)


def _bn(x, sd, prefix):
    return F.batch_norm(
        x,
        sd[prefix + "running_mean"],
        sd[prefix + "running_var"],
        sd[prefix + "weight"],
        sd[prefix + "bias"],
        training=False,
        eps=1e-5,
    )


@pytest.mark.parametrize("in_ch, out_ch, stride", [(3, 3, 1), (3, 5, 2)])
def test_basic_block_equals_torchvision_forward_from_state_dict(in_ch, out_ch, stride):
    """torchvision's BasicBlock.forward written out with F.* on the same state dict (eval)."""
    block = BasicBlock(in_ch, out_ch, stride).double()
    with torch.no_grad():  # non-trivial BN statistics and affine parameters
        for m in block.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_()
                m.bias.normal_()
    block.eval()
    sd = block.state_dict()
    x = torch.randn(2, in_ch, 6, 6, dtype=D64)
    out = F.relu(_bn(F.conv2d(x, sd["conv1.weight"], stride=stride, padding=1), sd, "bn1."))
    out = _bn(F.conv2d(out, sd["conv2.weight"], padding=1), sd, "bn2.")
    identity = x
    if "downsample.0.weight" in sd:
        identity = _bn(F.conv2d(x, sd["downsample.0.weight"], stride=stride), sd, "downsample.1.")
    torch.testing.assert_close(block(x), F.relu(out + identity), atol=1e-12, rtol=0)


@pytest.mark.parametrize("in_ch, out_ch, stride", [(4, 4, 1), (4, 6, 2)])
def test_zero_init_residual_gives_relu_of_shortcut(in_ch, out_ch, stride):
    block = BasicBlock(in_ch, out_ch, stride, zero_init_residual=True)
    x = torch.randn(2, in_ch, 6, 6)
    for train in (True, False):
        block.train(train)
        shortcut = x if block.downsample is None else block.downsample(x)
        torch.testing.assert_close(block(x), F.relu(shortcut), atol=1e-6, rtol=0)
    if block.downsample is None:
        torch.testing.assert_close(block(x), F.relu(x), atol=0, rtol=0)


def test_basic_block_init_and_gradients():
    block = BasicBlock(16, 32, 2)
    std = math.sqrt(2.0 / (32 * 9))  # He-normal, fan_out = out_ch · 3 · 3
    assert abs(block.conv2.weight.std().item() / std - 1) < 0.05  # 9 216 samples
    assert torch.all(block.bn1.weight == 1) and torch.all(block.bn1.bias == 0)
    block(torch.randn(2, 16, 5, 5)).sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0, name
