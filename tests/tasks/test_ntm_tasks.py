"""NTM tasks: generators (delimiters, masks, targets checked position by position), the
seeded stream and its resume, the output-phase-only loss and bit errors on hand cases, an
oracle that scores 0 errors, the Trainer end to end, and the memory-trace files."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from seqlab import api
from seqlab.config import ConfigError
from seqlab.data.algorithmic_bits import BitsBatcher, BitsSpec, generate, io_sizes
from seqlab.inspect.memory import memory_trace, plot_memory, save_trace
from seqlab.models.ntm import BitSeqOutput
from seqlab.tasks.ntm_tasks import NTMTask, NTMTaskConfig, bit_errors, masked_bce

torch.set_num_threads(1)
PRESET = Path(__file__).resolve().parents[2] / "configs" / "ntm-copy.yaml"


def rng(seed=0):
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------- generators


def test_copy_layout():
    """L = 3, W = 4: T = 7; vectors at t = 0…2, delimiter channel 4 at t = 3, targets =
    the vectors at t = 4…6 (mask), zero input in the output phase."""
    b = generate(BitsSpec("copy", width=4), rng(), 5, 3)
    assert b.x.shape == (5, 7, 5) and b.y.shape == (5, 7, 4) and b.mask.shape == (5, 7)
    assert b.mask.tolist() == [[False] * 4 + [True] * 3] * 5
    assert torch.equal(b.x[:, :, 4], torch.tensor([[0, 0, 0, 1.0, 0, 0, 0]] * 5))
    assert torch.equal(b.y[:, 4:], b.x[:, :3, :4])
    assert (b.x[:, 4:] == 0).all() and (b.y[:, :4] == 0).all()
    assert set(b.x[:, :3, :4].unique().tolist()) == {0.0, 1.0}


def test_repeat_copy_layout_end_marker_and_normalised_count():
    spec = BitsSpec("repeat_copy", width=3, min_repeats=1, max_repeats=4)
    b = generate(spec, rng(1), 6, 2)
    L, W = 2, 3
    counts = b.x[:, L, W + 1]  # (B,) normalised n
    n = torch.round(counts * math.sqrt(15 / 12) + 2.5).long()  # uniform{1..4}: μ 2.5, σ² 15/12
    assert ((n >= 1) & (n <= 4)).all() and len(set(n.tolist())) > 1
    assert b.x.shape[1] == L + 2 + int(n.max()) * L
    for i in range(6):
        end = L + 1 + int(n[i]) * L
        assert b.x[i, L, W] == 1.0  # delimiter
        assert b.mask[i].nonzero().flatten().tolist() == list(range(L + 1, end + 1))
        assert b.y[i, end, W] == 1.0 and b.y[i, :end, W].sum() == 0  # end marker only there
        copies = b.y[i, L + 1 : end, :W].reshape(int(n[i]), L, W)
        assert torch.equal(copies, b.x[i, :L, :W].expand(int(n[i]), L, W))


def test_recall_layout_delimiters_and_answer():
    """3 items of K = 2 vectors: item delimiter (channel W) at t = 0, 3, 6; query delimiter
    (channel W + 1) at t = 9 and 12 around the query item; answer = the next item."""
    spec = BitsSpec("recall", width=4, item_len=2)
    b = generate(spec, rng(2), 8, 3)
    W, K = 4, 2
    assert b.x.shape == (8, 3 * 3 + 1 + K + 1 + K, W + 2)
    assert (b.x[:, :, W].nonzero()[:, 1].view(8, 3) == torch.tensor([0, 3, 6])).all()
    assert (b.x[:, :, W + 1].nonzero()[:, 1].view(8, 2) == torch.tensor([9, 12])).all()
    items = b.x[:, :9, :W].reshape(8, 3, 3, W)[:, :, 1:]  # (B, n, K, W)
    query = b.x[:, 10:12, :W]
    for i in range(8):
        q = [j for j in range(2) if torch.equal(items[i, j], query[i])]
        assert q, "the query is one of the first n − 1 items"
        assert torch.equal(b.y[i, -K:], items[i, q[0] + 1])
    assert b.mask[:, -K:].all() and not b.mask[:, :-K].any()


def test_priority_sort_targets_are_the_top_priorities_in_order():
    spec = BitsSpec("priority_sort", width=5, sort_keep=0.8)
    b = generate(spec, rng(3), 4, 10)
    n, n_out, W = 10, 8, 5
    assert b.x.shape == (4, n + 1 + n_out, W + 2) and b.mask[:, n + 1 :].all()
    assert (b.x[:, n, W + 1] == 1).all() and b.x[:, :n, W + 1].sum() == 0
    for i in range(4):
        prio = b.x[i, :n, W]
        order = torch.argsort(prio, descending=True)[:n_out]
        assert torch.equal(b.y[i, n + 1 :], b.x[i, order, :W])


def test_generation_is_seeded_and_io_sizes():
    for problem in ("copy", "repeat_copy", "recall", "priority_sort"):
        spec = BitsSpec(problem, width=6)
        a, b = generate(spec, rng(5), 3, 4), generate(spec, rng(5), 3, 4)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert (a.x.shape[-1], a.y.shape[-1]) == io_sizes(spec)
    with pytest.raises(ValueError, match="length >= 2"):
        generate(BitsSpec("recall"), rng(), 2, 1)


def test_batcher_stream_resumes_where_it_stopped():
    batcher = BitsBatcher(4, 3)
    it = iter(batcher)
    head = [next(it), next(it)]
    state = batcher.state_dict()
    rest = list(it)
    again = BitsBatcher(4, 3)
    again.load_state_dict(state)
    assert head == [[0, 0, 0], [0, 1, 0]]
    assert list(again) == rest == [[0, 2, 0], [0, 3, 0]]
    assert batcher.epoch == again.epoch == 1 and next(iter(again)) == [1, 0, 0]
    with pytest.raises(ValueError, match="batch_size"):
        BitsBatcher(4, 5).load_state_dict(state)


def test_training_batches_depend_on_the_id_and_the_run_seed_only():
    cfg = NTMTaskConfig(max_len=5, batch_size=3, n_eval=2)
    tasks = []
    for seed in (7, 7, 8):
        task = NTMTask(cfg, None, seed=seed)
        task.prepare()
        tasks.append(task)
    a, b, c = (t.collate([0, 2, 0]) for t in tasks)
    assert torch.equal(a.x, b.x) and a.x.shape[0] == 3
    assert a.x.shape != c.x.shape or not torch.equal(a.x, c.x)
    d = tasks[0].collate([0, 3, 0])
    assert a.x.shape != d.x.shape or not torch.equal(a.x, d.x)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="min_len"):
        NTMTaskConfig(problem="recall", min_len=1, max_len=6)
    with pytest.raises(ConfigError, match="test_lengths"):
        NTMTaskConfig(test_lengths=())
    with pytest.raises(ConfigError, match="sort_keep"):
        NTMTaskConfig(problem="priority_sort", sort_keep=0.0)


# ------------------------------------------------------------------------ loss and scoring


def test_loss_counts_only_the_output_phase():
    """logits 0 → every scored bit costs ln 2: copy L = 3, W = 4 → 12 ln 2 per sequence;
    logits outside the mask change nothing."""
    b = generate(BitsSpec("copy", width=4), rng(), 2, 3)
    logits = torch.zeros(2, 7, 4, requires_grad=True)
    cost = masked_bce(logits, b.y, b.mask)
    torch.testing.assert_close(cost, torch.full((2,), 12 * math.log(2)), atol=1e-6, rtol=0)
    cost.sum().backward()
    assert (logits.grad[:, :4] == 0).all() and (logits.grad[:, 4:] != 0).all()
    wild = torch.zeros(2, 7, 4)
    wild[:, :4] = 30.0 * torch.randn(2, 4, 4)
    assert torch.equal(masked_bce(wild, b.y, b.mask), masked_bce(torch.zeros(2, 7, 4), b.y, b.mask))


def test_bit_errors_hand_case():
    y = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)
    mask = torch.tensor([[False, True, True]])
    logits = torch.tensor([[[-5.0, 5.0], [-1.0, -1.0], [2.0, 0.5]]])  # t = 1: one wrong bit
    assert bit_errors(logits, y, mask).tolist() == [1.0]


class CopyOracle(nn.Module):
    """Outputs ±20 for the bit each copy step must repeat (finds the delimiter itself)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        B, T, _ = x.shape
        L = int(x[0, :, self.width].nonzero()[0])
        bits = torch.zeros(B, T, self.width)
        bits[:, L + 1 :] = x[:, :L, : self.width]
        return BitSeqOutput(logits=40.0 * bits - 20.0 + 0 * self.dummy)


def test_evaluate_oracle_scores_zero_and_reports_each_test_length():
    cfg = NTMTaskConfig(width=4, max_len=5, test_lengths=(6, 9), n_eval=10, eval_batch_size=4)
    task = NTMTask(cfg, None, seed=0)
    task.prepare()
    assert sum(b.x.shape[0] for b in task.splits["valid"]) == 5 * 10
    metrics = task.evaluate(CopyOracle(4), "test")
    assert metrics["bit_errors"] == 0 and metrics["bit_errors@6"] == 0
    assert metrics["bit_errors@9"] == 0 and metrics["bit_errors_max"] == 0
    assert metrics["cost_bits"] < 1e-6 and "cost_bits@9" in metrics
    valid = task.evaluate(CopyOracle(4), "valid")
    assert valid["bit_errors"] == 0 and "bit_errors@3" not in valid
    # the all-zero-logit model scores exactly the mean number of output bits × ln 2
    zero = task.evaluate(ZeroModel(4), "valid")
    torch.testing.assert_close(
        zero["cost_bits"], 4 * 3.0, atol=1e-6, rtol=0
    )  # fp32 BCE; mean L = 3


class ZeroModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return BitSeqOutput(logits=torch.zeros(*x.shape[:2], self.width) + 0 * self.dummy)


# -------------------------------------------------------------------- end to end, traces


def test_train_load_evaluate_trace_and_plot(tmp_path):
    overrides = [
        "task.width=3",
        "task.max_len=3",
        "task.test_lengths=[4]",
        "task.n_eval=4",
        "task.batch_size=4",
        "model.controller_size=8",
        "model.memory_n=8",
        "model.memory_w=4",
        "train.max_steps=4",
        "train.valid_every=2",
        "train.save_every=2",
        "train.max_minutes=null",
    ]
    run = api.train(
        "configs/ntm-copy.yaml", run_dir=tmp_path / "run", overrides=overrides, quiet=True
    )
    assert run.metrics["step"] == 4 and "bit_errors" in run.metrics["valid"]
    loaded = api.load(tmp_path / "run")
    metrics = loaded.evaluate("test")
    assert set(metrics) >= {"bit_errors@4", "cost_bits@4", "loss"}
    trace = loaded.trace(4, seed=1)
    assert trace["x"].shape == (9, 4) and trace["write_weights"].shape == (9, 1, 8)
    npz, js = save_trace(trace, tmp_path / "trace" / "copy-4")
    assert set(np.load(npz).files) == set(trace)
    info = json.loads(js.read_text())["info"]["summary"]
    assert info["output_steps"] == 4 and len(info["write_weights"][0]["argmax"]) == 9
    png = plot_memory(trace, tmp_path / "copy.png", title="copy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_of_a_model_without_memory():
    spec = BitsSpec("copy", width=4)
    b = generate(spec, rng(), 2, 3)
    trace = memory_trace(CopyOracle(4), b)
    assert "read_weights" not in trace and trace["outputs"].shape == (7, 4)
    assert ((trace["outputs"] > 0.5) == (trace["y"] > 0.5)).all()
