"""The optional copy terms of the pointer-generator's loss (seqlab.tasks.copy_losses):
hand-computed cases, the identity that makes switch supervision a re-weighting of the
NLL's switch factor, and the task's loss with both terms on."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab.models.pointer_generator import (
    PointerGenerator,
    PointerGeneratorConfig,
    final_distribution,
)
from seqlab.tasks.copy_losses import copied_targets, copy_switch_loss, copy_token_weights
from seqlab.tasks.copy_translation import CopyTranslationConfig
from tests.tasks.test_copy_translation import _task, files  # noqa: F401  (fixture)


def test_copy_token_weights_hand_example():
    """V = 5: ids 5 and 6 are copies (weight 3), the rest weigh 1, padding 0."""
    y = torch.tensor([[1, 5, 2, 0], [6, 3, 0, 0]])
    keep = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    w = copy_token_weights(y, keep, 5, 3.0)
    assert w.tolist() == [[1.0, 3.0, 1.0, 0.0], [3.0, 1.0, 0.0, 0.0]]
    assert copy_token_weights(y, keep, 5, 1.0).tolist() == keep.float().tolist()
    assert copied_targets(y, 5).tolist() == [[False, True, False, False], [True] + [False] * 3]


def test_copy_switch_loss_hand_example():
    """V = 5, source ids (3, 5, 2): y = 1 (not in source: −log p),
    5 (a copy: −log(1 − p)), 3 (in the source and the vocabulary: 0), pad (0)."""
    p = torch.tensor([[0.8, 0.3, 0.6, 0.5]])
    y = torch.tensor([[1, 5, 3, 0]])
    src = torch.tensor([[3, 5, 2]])
    keep = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    expected = -math.log(0.8) - math.log(1 - 0.3)
    got = copy_switch_loss(p, y, src, keep, 5)
    assert got.shape == () and math.isclose(float(got), expected, rel_tol=1e-6)
    # p_gen rounded to exactly 0 or 1 gives a large finite loss, not inf
    extreme = copy_switch_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[1, 5]]), src,
                               torch.ones(1, 2, dtype=torch.bool), 5)  # fmt: skip
    assert math.isfinite(float(extreme)) and float(extreme) > 50


def test_switch_term_is_the_switch_factor_of_the_nll():
    """∂(−log P(y))/∂p_gen = ∂switch/∂p_gen for a copied target (1 / (1 − p)) and for a
    target outside the source (−1 / p): the NLL already holds the supervised term once."""
    torch.manual_seed(0)
    V, S = 6, 4
    P_vocab = torch.softmax(torch.randn(1, V), -1)
    a = torch.softmax(torch.randn(1, S), -1)
    src_ext = torch.tensor([[2, 6, 3, 6]])  # id 6 = V + 0, an OOV seen twice
    keep = torch.ones(1, 1, dtype=torch.bool)
    for y in (6, 4):  # a copy; a word not in the source
        p = torch.tensor([0.37], dtype=torch.float64, requires_grad=True)
        P = final_distribution(P_vocab.double(), a.double(), p, src_ext, n_oov=1)
        (g_nll,) = torch.autograd.grad(-P[0, y].log(), p)
        q = p.detach().clone().requires_grad_(True)
        switch = copy_switch_loss(q[None], torch.tensor([[y]]), src_ext, keep, V)
        (g_switch,) = torch.autograd.grad(switch, q)
        torch.testing.assert_close(g_nll, g_switch.double())
        assert float(g_nll) == pytest.approx(1 / 0.63 if y == 6 else -1 / 0.37)


def test_config_refuses_bad_copy_terms():
    with pytest.raises(ValueError, match="copy_weight"):
        CopyTranslationConfig(copy_weight=0.5)
    with pytest.raises(ValueError, match="copy_weight"):
        CopyTranslationConfig(copy_weight=float("inf"))
    with pytest.raises(ValueError, match="switch_lambda"):
        CopyTranslationConfig(switch_lambda=-1.0)


def test_task_loss_with_both_copy_terms(files):  # noqa: F811
    """loss_sum = Σ m_t (−log P(y_t)) + λ_sw Σ switch_t + λ_cov Σ covloss_t; nll_sum stays
    the plain Σ −log P(y_t) (atol 1e-4, float32); the generated names are copies."""
    plain = _task(files, cov_lambda=0.5)
    task = _task(files, cov_lambda=0.5, copy_weight=3.0, switch_lambda=0.25)
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)
    model = PointerGenerator(cfg, **task.model_kwargs())
    b = task.collate([0, 1, 2, 3])
    V = len(task.tgt_vocab)
    assert int(copied_targets(b.y_out, V)[b.tgt_mask].sum()) >= 4  # one name per sentence
    det = model(b.src, b.src_mask, b.y_in, b.tgt_mask, b.src_ext, b.n_oov, details=True)
    nll_t = -det.log_probs.gather(-1, b.y_out[..., None]).squeeze(-1)  # (B, T)
    m = torch.where(b.y_out >= V, 3.0, 1.0) * b.tgt_mask
    switch = copy_switch_loss(det.p_gen, b.y_out, b.src_ext, b.tgt_mask, V)
    cov = det.cov_loss[b.tgt_mask].sum()
    out = task.loss(model, b)
    torch.testing.assert_close(out.nll_sum, nll_t[b.tgt_mask].sum().detach(), atol=1e-4, rtol=0)
    expected = (m * nll_t).sum() + 0.25 * switch + 0.5 * cov
    torch.testing.assert_close(out.loss_sum, expected, atol=1e-4, rtol=0)
    assert float(out.loss_sum.detach()) > float(plain.loss(model, b).loss_sum.detach()) + 1.0
    torch.testing.assert_close(plain.loss(model, b).nll_sum, out.nll_sum)
