"""``seqlab.eval.copy_invariants``: the five checks on a pointer-generator with coverage,
for every decode-time ``<unk>`` rule and GNMT's coverage penalty, on sentences with
different numbers of source OOVs in one batch (three sizes of extended vocabulary). A
step that drops coverage fails, and so does a search through ``unk_to_copy`` checked
against the model's own distribution."""

# ruff: noqa: F811  (the fixtures imported from test_copy_translation are parameters here)
from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from torch import nn

from seqlab.eval.copy_invariants import CopySources
from seqlab.eval.invariants import run_checks
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from tests.tasks.test_copy_translation import _one_thread, _pairs, _task, _write  # noqa: F401

SENTENCES = [
    "Ein Mann namens Boa läuft.",
    "Ein Kind.",
    "Eine Frau namens Kara und ein Mann namens Tuo und Mesi laufen.",
    "Ein Mann namens Linu schläft.",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A pointer-generator with coverage trained 40 updates on the generated pairs, so that
    its outputs are sentences with copies (an untrained one ends at once)."""
    root = tmp_path_factory.mktemp("copy_check")
    files = {**_write(root, "train", _pairs(400, 0)), **_write(root, "valid", _pairs(30, 1)),
             **_write(root, "test", _pairs(30, 2))}  # fmt: skip
    task = _task(files)
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=16, hidden_size=16, attn_dim=16, out_dim=16,
                                 dropout=0.0)  # fmt: skip
    model = PointerGenerator(cfg, **task.model_kwargs())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = random.Random(0)
    for _ in range(40):
        out = task.loss(model, task.collate(rng.sample(range(400), 32)))
        (out.loss_sum / out.n_tokens).backward()
        opt.step()
        opt.zero_grad()
    examples = task._examples_of(SENTENCES)
    assert len({len(e.oovs) for e in examples}) == 3  # extended vocabularies of 3 sizes
    return task, model.eval(), examples


@pytest.mark.parametrize(
    "rule, beta",
    [("none", 0.0), ("block_unk", 0.0), ("unk_to_copy", 0.0), ("unk_to_copy", 0.5)],
)
def test_all_checks_pass_for_each_decoding_rule(setup, rule, beta):
    task, model, examples = setup
    sources = CopySources(examples, len(task.tgt_vocab), rule == "block_unk",
                          rule == "unk_to_copy", beta)  # fmt: skip
    settings = dataclasses.replace(task._settings(3), coverage_penalty=beta)
    checks = run_checks(model, sources, settings)
    assert len(checks) == 5
    positions = int(checks[0].compared.split(" at ")[1].split()[0])
    assert positions > 4 * len(SENTENCES)  # real outputs, not an immediate </s>
    for c in checks:
        assert c.passed and c.max_diff < 1e-11, c


class DropsCoverage(nn.Module):
    """A pointer-generator whose step forgets the coverage vector (c^t stays 0), the kind
    of bug that makes inference differ from training."""

    def __init__(self, inner: PointerGenerator):
        super().__init__()
        self.inner = inner

    def __getattr__(self, name):
        if name == "inner":
            return super().__getattr__(name)
        return getattr(self.inner, name)

    def forward(self, *args, **kw):
        return self.inner(*args, **kw)

    def step(self, y_prev, state):
        log_p, new = self.inner.step(y_prev, state)
        return log_p, dataclasses.replace(new, cov=torch.zeros_like(new.cov))


def test_a_step_without_coverage_fails_the_cached_check(setup):
    task, model, examples = setup
    sources = CopySources(examples, len(task.tgt_vocab))
    checks = {c.name: c for c in run_checks(DropsCoverage(model), sources, task._settings(3))}
    assert not checks["cached == full forward"].passed
    assert checks["cached == full forward"].max_diff > 1e-3
    assert not checks["search log P == forward log P"].passed
    assert checks["padding changes nothing"].passed


def test_the_search_rule_must_be_applied_to_the_forward(setup):
    task, model, examples = setup

    class ForgetsTheRule(CopySources):
        def search_log_p(self, log_p):
            return log_p

    sources = ForgetsTheRule(examples, len(task.tgt_vocab), unk_to_copy=True)
    checks = {c.name: c for c in run_checks(model, sources, task._settings(3))}
    assert not checks["search log P == forward log P"].passed
    assert checks["cached == full forward"].passed  # the model itself is fine
    with pytest.raises(ValueError, match="choose one"):
        CopySources(examples, 13, block_unk=True, unk_to_copy=True)
