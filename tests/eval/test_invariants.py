"""``seqlab.eval.invariants``: the five checks pass on every translation model (to ~1e-12 in
float64) and each one fails on a model with the bug it is there to catch."""

# ruff: noqa: F811  (the fixtures imported from test_translation are parameters here)
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from seqlab.catalog import load_all
from seqlab.eval.invariants import Check, _compare, _Output, run_checks
from seqlab.registry import MODELS
from tests.tasks.test_translation import _one_thread, prepared  # noqa: F401

SMALL = {
    "transformer": dict(d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=2,
                        dropout=0.0, share_embeddings=True),
    "convs2s": dict(emb_dim=16, channels=16, encoder_layers=2, decoder_layers=2, dropout=0.0),
    "bahdanau": dict(emb_dim=16, hidden_size=16, attn_dim=8, readout_dim=8, dropout=0.0),
    "luong": dict(emb_dim=16, hidden_size=16, dropout=0.0),
    "cho": dict(emb_dim=16, hidden_size=16, readout_dim=8, dropout=0.0),
    "sutskever": dict(emb_dim=16, hidden_size=16, layers=2, dropout=0.0),
}  # fmt: skip
NAMES = ["cached == full forward", "padding changes nothing", "batched == unbatched (beam 3)",
         "beam 1 == greedy", "search log P == forward log P"]  # fmt: skip


def build(task, name: str) -> nn.Module:
    """A small model over the task's vocabularies, weights U(−0.5, 0.5) so that its outputs
    vary in length and content (a fresh model repeats one token)."""
    load_all()  # registers every model
    torch.manual_seed(0)
    entry = MODELS.get(name)
    model = entry.target(entry.config_cls(**SMALL[name]), **task.model_kwargs())
    for p in model.parameters():
        nn.init.uniform_(p, -0.5, 0.5)
    return model.eval()


def sources(task, n: int = 6):
    return task.ids["valid"][0][:n]


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_translation_model_passes_in_float64(prepared, name):
    model = build(prepared, name)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    checks = run_checks(model, sources(prepared), prepared._settings(3))
    assert [c.name for c in checks] == NAMES
    for c in checks:
        assert c.passed, c
        assert c.max_diff < 1e-11, c  # two correct paths differ only by rounding
    # the caller's model is untouched (checks run on a float64 copy)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert next(model.parameters()).dtype == torch.float32


def test_float32_uses_its_own_tolerance(prepared):
    checks = run_checks(build(prepared, "transformer"), sources(prepared), prepared._settings(3),
                        dtype=torch.float32)  # fmt: skip
    assert all(c.passed and c.tol == 1e-3 for c in checks)
    assert max(c.max_diff for c in checks) > 0.0  # float32 paths do round differently
    with pytest.raises(ValueError, match="float64 or torch.float32"):
        run_checks(build(prepared, "transformer"), sources(prepared), prepared._settings(3),
                   dtype=torch.float16)  # fmt: skip
    with pytest.raises(ValueError, match="at least one source"):
        run_checks(build(prepared, "transformer"), [], prepared._settings(3))


class StaleCache(nn.Module):
    """A decoder step whose logits drift from ``forward``'s after 3 steps (as a cache that
    loses or corrupts its history would)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def encode(self, src, src_mask):
        return self.inner.encode(src, src_mask)

    def init_state(self, memory, src_mask):
        return self.inner.init_state(memory, src_mask)

    def forward(self, src, src_mask, y_in, tgt_mask):
        return self.inner(src, src_mask, y_in, tgt_mask)

    def step(self, y_prev, state):
        t = int(state.length)  # steps the cache holds before this one
        logits, state = self.inner.step(y_prev, state)
        if t >= 3:
            logits = logits + 0.01 * torch.arange(logits.size(-1), dtype=logits.dtype)
        return logits, state


class IgnoresSourceMask(StaleCache):
    """Attends to source padding: the encoder and the decoder see an all-true mask."""

    def encode(self, src, src_mask):
        return self.inner.encode(src, torch.ones_like(src_mask))

    def init_state(self, memory, src_mask):
        return self.inner.init_state(memory, torch.ones_like(src_mask))

    def forward(self, src, src_mask, y_in, tgt_mask):
        return self.inner(src, torch.ones_like(src_mask), y_in, tgt_mask)

    def step(self, y_prev, state):
        return self.inner.step(y_prev, state)


def test_a_step_that_differs_from_forward_fails_cached_and_search_checks(prepared):
    checks = by_name(run_checks(StaleCache(build(prepared, "transformer")), sources(prepared),
                                prepared._settings(3)))  # fmt: skip
    cached = checks["cached == full forward"]
    assert not cached.passed and cached.max_diff > 1e-3
    assert "target position" in cached.worst
    assert int(cached.worst.rsplit(" ", 1)[1]) >= 4  # the first 3 steps are right
    assert not checks["search log P == forward log P"].passed
    assert checks["padding changes nothing"].passed  # forward alone is fine


def test_attending_to_padding_fails_the_padding_and_batching_checks(prepared):
    checks = by_name(run_checks(IgnoresSourceMask(build(prepared, "transformer")),
                                sources(prepared), prepared._settings(3)))  # fmt: skip
    assert not checks["padding changes nothing"].passed
    assert checks["padding changes nothing"].max_diff > 1e-3
    assert not checks["batched == unbatched (beam 3)"].passed
    assert checks["cached == full forward"].passed  # both paths equally wrong
    assert checks["beam 1 == greedy"].passed


def test_compare_counts_token_mismatches_and_nan_fails():
    a = _Output([[5, 2], [6, 2]], [-1.0, -2.0], [-1.0, -2.0])
    b = _Output([[5, 2], [7, 2]], [-1.0 + 1e-12, -9.0], [-1.0, -9.0])
    c = _compare("x", "two", a, b, "log_probs", 1e-8)
    assert c.mismatches == 1 and not c.passed
    assert c.max_diff == pytest.approx(1e-12, abs=1e-15)  # only sentence 0 is compared
    assert "tokens differ in sentences 1" in c.worst
    n = _compare("x", "two", a, _Output(a.tokens, [math.nan, -2.0], a.scores), "log_probs", 1e-8)
    assert math.isnan(n.max_diff) and not n.passed and n.worst == "sentence 0"
    assert Check("y", "z", 0.0, 1e-8).record()["passed"] is True
