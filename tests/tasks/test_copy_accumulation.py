"""Gradient accumulation on the pointer-generator's task (USER-NEEDS §8, §16): k
microbatches give the gradient of one batch of their union, with the copy weight, the
coverage loss and per-batch extended vocabularies of different sizes (each microbatch
numbers its own source OOVs)."""

from __future__ import annotations

import torch

from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.train.distributed import DistContext
from seqlab.train.steps import accumulate_gradients
from tests.tasks.test_copy_translation import _task, files  # noqa: F401

SMALL = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)


def _grads(model, task, batches):
    model.zero_grad(set_to_none=True)
    loss_sum, _, N = accumulate_gradients(model, task, batches, DistContext())
    return {n: p.grad.clone() for n, p in model.named_parameters()}, float(loss_sum) / N, N


def test_microbatches_equal_one_batch_of_their_union(files):  # noqa: F811
    task = _task(files, copy_weight=3.0, cov_lambda=0.5)
    torch.manual_seed(0)
    model = PointerGenerator(SMALL, **task.model_kwargs()).double()
    parts = [[0, 1, 2], [3, 4, 5, 6, 7], [8, 9]]
    micro = [task.collate(ix) for ix in parts]
    union = task.collate([i for ix in parts for i in ix])
    assert len({b.n_oov for b in micro}) > 1 or len({b.n_tokens for b in micro}) > 1
    g_acc, loss_acc, n_acc = _grads(model, task, micro)
    g_one, loss_one, n_one = _grads(model, task, [union])
    assert n_acc == n_one == union.n_tokens
    # the reported loss sums are float32 by design (no host sync); the gradients are float64
    assert abs(loss_acc - loss_one) < 1e-6 * abs(loss_one)
    for name in g_one:
        torch.testing.assert_close(g_acc[name], g_one[name], atol=1e-10, rtol=0, msg=name)
