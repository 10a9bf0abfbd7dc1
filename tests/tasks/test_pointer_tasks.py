"""The ``pointer`` task: batches by hand, the metrics through scripted (oracle) decoders
whose answers are known, and an end-to-end train → load → evaluate → predict for the
pointer net and for the seq2seq baseline. Coverage comparisons use atol 1e-12 (rtol 0).
"""

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from seqlab import api
from seqlab.config import ConfigError
from seqlab.data.geometry import hull_coverage
from seqlab.data.vocab import EOS_ID
from seqlab.errors import SeqlabError
from seqlab.models.pointer_net import END
from seqlab.tasks.pointer_tasks import (
    N_SPECIAL,
    POS_PAD,
    PointerTask,
    PointerTaskConfig,
    collate_pointer,
    quantise,
)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make_task(**kw) -> PointerTask:
    cfg = PointerTaskConfig(**{"n_train": 20, "n_valid": 30, "n_test": 20, **kw})
    task = PointerTask(cfg)
    task.prepare()
    return task


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="task.n "):
        PointerTaskConfig(problem="hull", n=2)
    with pytest.raises(ConfigError, match="n_min"):
        PointerTaskConfig(n=10, n_min=11)
    with pytest.raises(ConfigError, match="test_n"):
        PointerTaskConfig(test_n=(2,))
    with pytest.raises(ConfigError, match="bins"):
        PointerTaskConfig(bins=1)
    assert PointerTaskConfig(problem="sort", n=1, test_n=(1,)).n == 1


def test_collate_pointer_by_hand():
    a = (np.array([[0.5], [0.1], [0.3]], dtype=np.float32), np.array([1, 2, 0]))
    b = (np.array([[0.9], [0.2]], dtype=np.float32), np.array([1, 0]))
    batch = collate_pointer([a, b])
    assert batch.src.shape == (2, 3, 1) and batch.src[1, 2, 0] == 0
    assert batch.src_mask.tolist() == [[True, True, True], [True, True, False]]
    assert batch.y_in.tolist() == [[END, 2, 3, 1], [END, 2, 1, END]]
    assert batch.y_out.tolist() == [[2, 3, 1, END], [2, 1, END, POS_PAD]]
    assert batch.tgt_mask.tolist() == [[True] * 4, [True, True, True, False]]
    assert batch.n_tokens == 7


def test_quantise_and_token_batches_by_hand():
    pts = np.array([[0.0, 0.999], [0.505, 0.1]], dtype=np.float32)
    assert quantise(pts, 10) == [N_SPECIAL + 0, N_SPECIAL + 10 + 9, N_SPECIAL + 5, N_SPECIAL + 11]
    task = make_task(input="tokens", bins=10, n=4, test_n=(4, 6))
    assert task.model_kwargs() == {
        "src_vocab": N_SPECIAL + 20,
        "tgt_vocab": N_SPECIAL + 6,
        "pad_id": 0,
    }
    batch = task.collate([0, 1])
    points, hull = task.data["train"][0]
    assert batch.src[0].tolist() == quantise(points, 10)
    assert batch.y_out[0, : len(hull) + 1].tolist() == [*(hull + N_SPECIAL).tolist(), EOS_ID]
    assert task.train_lengths().tolist() == [9] * 20  # 2 tokens per point + 1
    assert make_task(problem="sort", n=7, test_n=(7,)).model_kwargs() == {"input_dim": 1}


@dataclass
class OracleState:
    target: Tensor  # (B, T) the output ids to emit, then the end id
    t: Tensor  # (B,) the next step
    width: int  # the number of output ids (S + 1 positions, or the token vocabulary)


class Oracle(nn.Module):
    """Emits the stored answer of each input (looked up by its source), optionally
    without the last hull vertex; follows the decoder contract for either input kind."""

    def __init__(self, task: PointerTask, splits, drop_last: bool = False) -> None:
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))
        self.vectors = task.cfg.input == "vectors"
        self.vocab = N_SPECIAL + task.n_max
        self.answers = {}
        for points, target in (ex for split in splits for ex in task.examples(split)):
            one = task.collate_examples([(points, target)])
            ids = target[:-1] if drop_last else target
            ids = ids + 1 if self.vectors else ids + N_SPECIAL
            end = END if self.vectors else EOS_ID
            self.answers[self.key(one.src[0], one.src_mask[0])] = [*ids.tolist(), end]

    def key(self, src: Tensor, mask: Tensor) -> tuple:
        return tuple(src[mask].flatten().tolist())

    def encode(self, src, src_mask):
        return [self.answers[self.key(s, m)] for s, m in zip(src, src_mask)]

    def init_state(self, memory, src_mask):
        T = max(map(len, memory))
        target = torch.tensor([a + a[-1:] * (T - len(a)) for a in memory])  # (B, T)
        width = src_mask.shape[1] + 1 if self.vectors else self.vocab
        return OracleState(target, torch.zeros(len(memory), dtype=torch.long), width)

    def step(self, y_prev, state):
        B, T = state.target.shape
        y = state.target.gather(1, state.t.clamp(max=T - 1)[:, None]).squeeze(1)  # (B,)
        logits = torch.full((B, state.width), -5.0)  # (B, V)
        logits[torch.arange(B), y] = 5.0
        return logits, OracleState(state.target, state.t + 1, state.width)

    def forward(self, src, src_mask, y_in, tgt_mask):
        state = self.init_state(self.encode(src, src_mask), src_mask)
        out = []
        for _ in range(y_in.shape[1]):
            logits, state = self.step(None, state)
            out.append(logits)
        return torch.stack(out, 1) + 0 * self.dummy  # (B, T, V)


@pytest.mark.parametrize("input_kind", ["vectors", "tokens"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_metrics_of_a_perfect_decoder(input_kind, beam_size):
    """The right answers score exact = coverage = valid = 1 on valid and every test n."""
    task = make_task(input=input_kind, n=6, n_min=4, test_n=(5, 8), beam_size=beam_size)
    for split in ("valid", "test_n5", "test_n8"):
        got = task.metrics(Oracle(task, [split]), task.examples(split))
        assert got["exact"] == 1.0 and got["valid"] == 1.0
        assert got["coverage"] == pytest.approx(1.0, abs=1e-12, rel=0)
        assert np.isfinite(got["loss"])


def test_metrics_of_a_decoder_that_drops_the_last_vertex():
    """exact = 0; coverage = the mean of |A(hull minus its last vertex)| / A(hull),
    computed independently (atol 1e-12); every such polygon with ≥ 3 vertices is valid."""
    task = make_task(n=9)
    examples = task.examples("valid")
    got = task.metrics(Oracle(task, ["valid"], drop_last=True), examples)
    want = [hull_coverage(p, c[:-1], c) for p, c in examples]
    assert got["exact"] == 0.0
    assert got["coverage"] == pytest.approx(float(np.mean(want)), abs=1e-12, rel=0)
    assert got["valid"] == pytest.approx(np.mean([len(c) > 3 for _, c in examples]))
    assert 0 < got["coverage"] < 1


def test_sort_metrics_and_test_split_keys():
    task = make_task(problem="sort", n=5, test_n=(3, 7))
    got = task.evaluate(Oracle(task, ["test_n3", "test_n7"]), "test")
    assert set(got) == {"loss_n3", "exact_n3", "loss_n7", "exact_n7"}
    assert got["exact_n3"] == got["exact_n7"] == 1.0
    with pytest.raises(SeqlabError, match="unknown split"):
        task.examples("test")


def test_label_smoothing_is_refused_for_pointers():
    task = make_task(n=5)
    oracle = Oracle(task, ["train"])
    with pytest.raises(SeqlabError, match="label_smoothing"):
        task.loss(oracle, task.collate([0, 1]), label_smoothing=0.1)


@pytest.mark.parametrize(
    "model",
    [
        {"name": "pointer_net", "hidden_size": 16, "attn_dim": 16},
        {"name": "bahdanau", "emb_dim": 8, "hidden_size": 8, "attn_dim": 8, "readout_dim": 8},
    ],
)
def test_train_load_evaluate_predict(tmp_path, model):
    """A few updates through the Trainer, then the checkpoint rebuilds alone: metrics of
    every test n in [0, 1], predict returns index lists."""
    vectors = model["name"] == "pointer_net"
    config = {
        "task": {
            "name": "pointer",
            "problem": "hull",
            "n": 5,
            "test_n": [4, 6],
            "n_train": 64,
            "n_valid": 16,
            "n_test": 16,
            "input": "vectors" if vectors else "tokens",
            "bins": 10,
        },
        "model": {**model, "dropout": 0.0},
        "train": {
            "max_steps": 3,
            "precision": "fp32",
            "batch": {"max_tokens": 200},
            "valid_every": 3,
            "save_every": 3,
            "progress": False,
        },
    }
    run = api.train(config, run_dir=tmp_path / "run", quiet=True)
    assert run.metrics["step"] == 3
    loaded = api.load(tmp_path / "run")
    got = loaded.evaluate("test")
    for k in (4, 6):
        for name in ("exact", "coverage", "valid"):
            assert 0.0 <= got[f"{name}_n{k}"] <= 1.0
    out = loaded.predict([[(0.1, 0.1), (0.9, 0.1), (0.5, 0.9), (0.5, 0.4)]])
    assert len(out) == 1 and all(-1 <= i < 4 for i in out[0])
    with pytest.raises(SeqlabError, match="predict"):
        loaded.predict([[0.1, 0.2]])
