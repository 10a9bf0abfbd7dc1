"""A fused optimizer step does not bump the weights' version counters (torch's behaviour,
checked here so that a change is noticed); seqlab's update (``apply_update``) bumps them,
so the searches' packed weights (seqlab.nn.packed_linear) and the compiled step's weight
check see every update: a validation decode after training steps uses the new weights."""

from __future__ import annotations

import torch
from torch import nn

from seqlab.nn import int8_linear, packed_linear
from seqlab.train.distributed import DistContext
from seqlab.train.steps import apply_update


class _NoSchedule:
    def step(self) -> None:
        pass


def _train_step(layer: nn.Linear, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = layer(x).square().sum()
    loss.backward()
    apply_update(
        layer,
        optimizer,
        _NoSchedule(),
        loss.detach(),
        loss.detach(),
        n_tokens=1,
        dist=DistContext(),
        step=1,
        clip_norm=None,
    )


def _packed_output(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer inside a decoding search's packing (int8: available on every CPU)."""
    with torch.no_grad(), int8_linear.int8_decoding(), packed_linear.packed_linears(layer):
        return layer(x)


def test_a_fused_step_alone_leaves_the_versions():
    layer = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    before = layer.weight._version
    layer(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert layer.weight._version == before  # torch 2.13: the premise of mark_updated


def test_packed_weights_follow_fused_training_steps():
    torch.manual_seed(0)
    layer = nn.Linear(16, 8)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1, fused=True)
    x = torch.randn(5, 16)
    first = _packed_output(layer, x)  # packed and cached
    versions = (layer.weight._version, layer.bias._version)
    _train_step(layer, optimizer, x)
    assert layer.weight._version > versions[0] and layer.bias._version > versions[1]
    fresh = int8_linear.int8_product(x, int8_linear.quantize_weight(layer.weight, layer.bias))
    after = _packed_output(layer, x)
    assert not torch.equal(after, first)  # not the stale packed copy
    assert torch.equal(after, fresh)  # the updated weights, packed again
