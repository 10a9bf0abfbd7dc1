"""Checkpoint averaging (Vaswani et al. 2017 §6.1): the mean by hand, tied tensors stay
tied, integer buffers from the newest, refusals, and the CLI on a real tiny run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqlab import api
from seqlab.cli.main import main
from seqlab.errors import CheckpointError
from seqlab.train.averaging import average_checkpoints, last_checkpoints
from seqlab.train.checkpoint import load_checkpoint, save_checkpoint
from tests.train.tiny import tiny


class Tied(nn.Module):
    """An embedding tied to the output projection, a bf16 layer and an integer buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.out = nn.Linear(3, 5, bias=False)
        self.out.weight = self.embed.weight
        self.low = nn.Linear(3, 2).to(torch.bfloat16)
        self.register_buffer("count", torch.tensor(0))


def _saved(tmp_path, seed, step, config=None):
    torch.manual_seed(seed)
    m = Tied()
    m.count.fill_(step)
    opt = torch.optim.Adam(m.parameters())
    path = save_checkpoint(
        tmp_path / f"step-{step:06d}", model=m, optimizer=opt, step=step,
        config=config or {"model": {"name": "tied"}}, tokenizer_state={"v": [1, 2]},
    )  # fmt: skip
    return m, path


def test_average_is_the_mean_and_keeps_ties(tmp_path):
    models, paths = zip(*[_saved(tmp_path, seed, 10 * seed) for seed in (1, 2, 3)])
    out = average_checkpoints(paths, tmp_path / "avg")
    avg = Tied()
    meta = load_checkpoint(out, model=avg)
    for name in ("embed.weight", "low.weight", "low.bias"):
        stack = torch.stack([dict(m.named_parameters())[name].double() for m in models])
        want = stack.mean(0).to(dict(avg.named_parameters())[name].dtype)
        assert torch.equal(dict(avg.named_parameters())[name], want), name
    assert avg.low.weight.dtype == torch.bfloat16
    assert avg.out.weight is avg.embed.weight  # still one tensor after loading
    assert int(avg.count) == 30  # integer buffers: the newest checkpoint's
    assert meta.step == 30 and meta.tokenizer_state == {"v": [1, 2]}
    assert meta.extra["averaged_from"] == [str(p) for p in paths]
    assert meta.rng is None and meta.raw["optimizer"] is None  # for evaluation, not resuming
    with pytest.raises(CheckpointError, match="no optimizer state"):
        load_checkpoint(out, model=Tied(), optimizer=torch.optim.Adam(Tied().parameters()))
    # one checkpoint "averaged" is itself; the order of the inputs does not matter
    single = Tied()
    load_checkpoint(average_checkpoints(paths[:1], tmp_path / "one"), model=single)
    assert torch.equal(single.embed.weight, models[0].embed.weight)
    rev = Tied()
    load_checkpoint(average_checkpoints(paths[::-1], tmp_path / "rev"), model=rev)
    assert torch.allclose(rev.embed.weight, avg.embed.weight, atol=1e-7)


def test_refusals(tmp_path):
    _, a = _saved(tmp_path, 1, 1)
    _, b = _saved(tmp_path, 2, 2, config={"model": {"name": "other"}})
    with pytest.raises(CheckpointError, match="different 'model' configs"):
        average_checkpoints([a, b], tmp_path / "x")
    # a resume with new train settings is still one model: its checkpoints average
    _, c = _saved(tmp_path, 3, 3, config={"model": {"name": "tied"}, "train": {"max_steps": 9}})
    load_checkpoint(average_checkpoints([a, c], tmp_path / "resumed"), model=Tied())
    with pytest.raises(CheckpointError, match="overwrite one of the averaged inputs"):
        average_checkpoints([a], a)
    with pytest.raises(CheckpointError, match="no checkpoints"):
        average_checkpoints([], tmp_path / "x")
    save_checkpoint(
        tmp_path / "lin", model=nn.Linear(2, 2), step=3, config={"model": {"name": "tied"}}
    )
    with pytest.raises(CheckpointError, match="in only one of the checkpoints"):
        average_checkpoints([tmp_path / "lin", a], tmp_path / "x")
    with pytest.raises(CheckpointError, match=r"last 5 checkpoints but there are 3"):
        last_checkpoints(tmp_path, 5)
    assert not (tmp_path / "x").exists()


def test_cli_averages_a_runs_last_checkpoints(tmp_path, capsys):
    cfg = tiny(**{"train.max_steps": 30, "train.save_every": 10, "train.keep_last": 3})
    api.train(cfg, run_dir=tmp_path / "run", quiet=True)
    assert main(["average", str(tmp_path / "run"), "--last", "2"]) == 0
    out = tmp_path / "run" / "checkpoints" / "average-last2"
    assert "averaged 2 checkpoints (step-000020, step-000030)" in capsys.readouterr().out
    loaded = api.load(out)
    assert loaded.step == 30
    assert set(loaded.evaluate("valid")) >= {"loss"}
    s20, s30 = (api.load(tmp_path / "run" / "checkpoints" / f"step-0000{k}0") for k in (2, 3))
    for (name, p), p20, p30 in zip(
        loaded.model.state_dict().items(), s20.model.state_dict().values(),
        s30.model.state_dict().values(),
    ):  # fmt: skip
        if p.is_floating_point():
            want = ((p20.double() + p30.double()) / 2).to(p.dtype)
            assert torch.equal(p, want), name
    # a run's own best/latest choice is untouched by the new directory
    assert api.load(tmp_path / "run", prefer="latest").checkpoint.name == "step-000030"
    assert main(["average", str(tmp_path / "run")]) == 2  # neither --last nor --out
