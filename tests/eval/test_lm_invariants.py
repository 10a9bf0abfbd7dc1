"""``seqlab.eval.lm_invariants``: the checks pass on every language model (to ~1e-12 in
float64) and each fails on a model with the bug it is there to catch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqlab.catalog import load_all
from seqlab.eval.lm_invariants import lm_rows, run_lm_checks
from seqlab.models.lm_common import LMOutput
from seqlab.registry import MODELS

pytestmark = pytest.mark.usefixtures("one_thread")

V = 30
SMALL = {
    "rnn_lm/rnn": ("rnn_lm", dict(cell="rnn", emb_dim=8, hidden=8, layers=2, dropout=0.0)),
    "rnn_lm/gru": ("rnn_lm", dict(cell="gru", emb_dim=8, hidden=8, layers=2, dropout=0.0)),
    "rnn_lm/lstm": ("rnn_lm", dict(cell="lstm", emb_dim=8, hidden=8, layers=2, dropout=0.0)),
    "transformer_lm": ("transformer_lm", dict(d_model=16, n_heads=2, d_ff=32, layers=2,
                                              context=32)),
    "nplm": ("nplm", dict(n=4, m=8, h=16)),
    "pointer_sentinel": ("pointer_sentinel", dict(emb_dim=8, hidden=8, layers=1, window=6,
                                                  dropout=0.0)),
}  # fmt: skip


def build(key: str) -> nn.Module:
    load_all()
    name, kw = SMALL[key]
    entry = MODELS.get(name)
    torch.manual_seed(0)
    return entry.target(entry.config_cls(**kw), vocab=V, pad_id=0).eval()


def rows(B: int = 3, T: int = 20) -> torch.Tensor:
    return torch.randint(4, V, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("key", sorted(SMALL))
def test_every_language_model_passes_in_float64(key):
    model = build(key)
    checks = run_lm_checks(model, rows())
    names = ["cached == full forward", "carried state == one pass", "batched == unbatched"]
    assert [c.name for c in checks] == names + (["fused == readable"] if "rnn_lm" in key else [])
    for c in checks:
        assert c.passed and c.max_diff < 1e-11, c
    assert next(model.parameters()).dtype == torch.float32  # checked on a float64 copy


class Broken(nn.Module):
    """An RNN LM with one injected bug (``bug``): the step forgets its state, a chunk
    ignores the carried state, rows leak through a batch mean, or the fused path drifts."""

    def __init__(self, inner: nn.Module, bug: str):
        super().__init__()
        self.inner, self.bug, self.cfg = inner, bug, inner.cfg

    def init_state(self, batch_size, device="cpu"):
        return self.inner.init_state(batch_size, device)

    def forward(self, x, state=None, fused=None):
        if self.bug == "chunk" and state is not None:
            state = None  # every chunk starts from scratch
        out = self.inner(x, state, fused=fused)
        logits = out.logits
        if self.bug == "leak":
            logits = logits + 0.5 * logits.roll(1, dims=0)  # (B, T, V): row b reads row b − 1
        if self.bug == "fused" and fused is not False:
            logits = logits + 1e-3 * torch.arange(V, dtype=logits.dtype)
        return LMOutput(logits, out.state)

    def step(self, x, state):
        if self.bug == "forget":
            state = self.init_state(x.size(0), x.device)
        logits, state = self.inner.step(x, state)
        if self.bug == "leak":
            logits = logits + 0.5 * logits.roll(1, dims=0)  # (B, V)
        return logits, state


@pytest.mark.parametrize(
    "bug, fails",
    [
        ("forget", {"cached == full forward"}),
        ("chunk", {"carried state == one pass"}),
        ("leak", {"batched == unbatched"}),
        ("fused", {"fused == readable", "cached == full forward"}),  # step is unfused
    ],
)
def test_each_bug_fails_its_check(bug, fails):
    checks = run_lm_checks(Broken(build("rnn_lm/gru"), bug), rows())
    failed = {c.name for c in checks if not c.passed}
    assert failed == fails, [(c.name, c.max_diff) for c in checks]
    for c in checks:
        if c.name in fails:
            assert c.max_diff > 1e-4 and c.worst.startswith("row ")


def test_rows_and_bad_input():
    stream = torch.arange(50)
    x = lm_rows(stream, rows=4, length=12)
    assert x.shape == (4, 12) and x[1, 0] == 12
    assert lm_rows(stream, rows=9, length=12).shape == (4, 12)  # as many as the split holds
    with pytest.raises(ValueError, match="fewer than one row of 64"):
        lm_rows(stream, rows=1, length=64)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        run_lm_checks(build("nplm"), rows(T=1))
    with pytest.raises(ValueError, match="float64 or torch.float32"):
        run_lm_checks(build("nplm"), rows(), dtype=torch.bfloat16)
