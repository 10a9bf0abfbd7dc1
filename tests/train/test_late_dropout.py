"""Late dropout (seqlab.train.late_dropout): the first S updates are exactly a dropout-0 run,
dropout is really on after them, every site follows, and resume is bitwise."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from seqlab.config import ConfigError
from seqlab.nn.dropout import Dropout
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.run_config import resolve_run
from seqlab.train.build import build_model, build_task
from seqlab.train.checkpoint import step_name
from seqlab.train.late_dropout import LateDropout, dropout_sites
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    t = load_file(run / "checkpoints" / step_name(step) / "tensors.safetensors")
    return {k: v for k, v in t.items() if k.startswith(("model.", "optim."))}


def _train(tmp_path: Path, name: str, steps: int, **over) -> Path:
    every = {"train.save_every": 2, "train.keep_last": 10, "train.valid_every": 100}
    cfg = tiny(**{"train.max_steps": steps, **every, **over})
    Trainer(resolve_run(cfg), tmp_path / name, quiet=True).fit()
    return tmp_path / name


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_every_site_follows_the_step():
    cfg = resolve_run(tiny())
    model = build_model(cfg, build_task(cfg))
    sites = dropout_sites(model)
    kinds = {type(m) for m, _, _ in sites}
    assert Dropout in kinds and MultiHeadAttention in kinds
    assert all(rate == 0.1 for _, _, rate in sites)
    late = LateDropout(model, start=3)
    for update in (1, 2, 3):
        late.apply(update)
        assert all(getattr(m, a) == 0.0 for m, a, _ in sites)
    late.apply(4)
    assert all(getattr(m, a) == 0.1 for m, a, _ in sites)
    lstm = nn.LSTM(4, 4, num_layers=2, dropout=0.3)
    plain = nn.Sequential(nn.Dropout(0.2), lstm, nn.Dropout(0.0))
    assert [(a, r) for _, a, r in dropout_sites(plain)] == [("p", 0.2), ("dropout", 0.3)]


def test_models_that_drop_out_functionally_expose_their_rate():
    from seqlab.models.captioner import ShowAttendTell, ShowAttendTellConfig
    from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig

    small = {"emb_dim": 8, "hidden_size": 8, "attn_dim": 8, "out_dim": 8, "dropout": 0.2}
    pg = PointerGenerator(PointerGeneratorConfig(**small), src_vocab=11, tgt_vocab=9)
    cap = ShowAttendTell(ShowAttendTellConfig(dropout=0.2), tgt_vocab=9)
    for model in (pg, cap):
        assert (model, "dropout", 0.2) in dropout_sites(model)
        LateDropout(model, start=5).apply(1)
        assert model.dropout == 0.0


def test_the_first_updates_are_a_dropout_free_run_and_dropout_is_on_after(tmp_path):
    late = _train(tmp_path, "late", 8, **{"train.dropout_from_step": 4})
    none = _train(tmp_path, "none", 8, **{"model.dropout": 0.0})
    always = _train(tmp_path, "always", 8)
    assert _equal(_weights(late, 4), _weights(none, 4))  # bitwise: no mask, no draw
    assert not _equal(_weights(late, 8), _weights(none, 8))  # dropout really on after 4
    assert not _equal(_weights(late, 8), _weights(always, 8))


@pytest.mark.parametrize("stop", [2, 6])  # stopped before and after the switch
def test_resume_is_bitwise(tmp_path, stop):
    full = _train(tmp_path, "full", 10, **{"train.dropout_from_step": 4})
    half = _train(tmp_path, "half", stop, **{"train.dropout_from_step": 4})
    Trainer.resume(half, ["train.max_steps=10"], quiet=True).fit()
    assert _equal(_weights(full, 10), _weights(half, 10))


def test_a_negative_start_is_refused():
    with pytest.raises(ConfigError, match="dropout_from_step must be >= 0"):
        resolve_run(tiny(**{"train.dropout_from_step": -1}))
