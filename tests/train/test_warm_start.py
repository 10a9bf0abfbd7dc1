"""``train.init_from``: a new run starts from another run's weights (and tokenizer) with a
fresh optimizer, schedule and step; new parameters keep their init; misfits are errors."""

import pytest
import torch
from safetensors.torch import load_file

from seqlab.errors import SeqlabError
from seqlab.run_config import resolve_run
from seqlab.train.checkpoint import step_name
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_warm_start_copies_the_weights_and_starts_the_rest_afresh(tmp_path):
    Trainer(resolve_run(tiny()), tmp_path / "src", quiet=True).fit()
    src = load_file(tmp_path / "src" / "checkpoints" / step_name(20) / "tensors.safetensors")
    over = {"train.init_from": str(tmp_path / "src" / "checkpoints" / step_name(20))}
    tr = Trainer(resolve_run(tiny(**over, **{"train.max_steps": 3})), tmp_path / "warm")
    assert tr.step == 0 and tr.warm_started == []  # same architecture: nothing new
    for name, p in tr.model.state_dict().items():  # before any update: the source's weights
        assert torch.equal(p, src[f"model.{name}"]), name
    assert not tr.optimizer.state  # Adam's moments start empty
    summary = tr.fit()
    assert summary["step"] == 3  # three updates of its own, not 20 + 3


def test_warm_start_reports_new_parameters_and_refuses_misfits(tmp_path):
    Trainer(resolve_run(tiny()), tmp_path / "src", quiet=True).fit()
    ckpt = str(tmp_path / "src" / "checkpoints" / step_name(20))
    wide = tiny(**{"train.init_from": ckpt, "model.d_ff": 64})
    with pytest.raises(SeqlabError, match=r"other shapes: .*d_ff|other shapes: .*\(64"):
        Trainer(resolve_run(wide), tmp_path / "wide")
    shallow = tiny(**{"train.init_from": ckpt, "model.encoder_layers": 0})
    with pytest.raises(SeqlabError, match="not in the model"):  # fewer layers
        Trainer(resolve_run(shallow), tmp_path / "shallow")
    untied = tiny(**{"train.init_from": ckpt, "model.tie_output": False})
    untied = Trainer(resolve_run(untied), None)
    assert untied.warm_started == ["W_out.weight"]  # new: keeps its own initialisation
    with pytest.raises(SeqlabError):
        Trainer(resolve_run(tiny(**{"train.init_from": str(tmp_path / "nowhere")})), None)
