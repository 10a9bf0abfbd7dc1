"""Running out of memory in a training step is one line naming the update, the microbatch's
tokens and shapes, and the settings that make it smaller (USER-NEEDS §11); other errors
pass through unchanged."""

import pytest
import torch

from seqlab.cli.main import main
from seqlab.run_config import resolve_run
from seqlab.train.steps import OutOfMemory
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _fail(trainer, at_call, exc):
    """Make the ``at_call``-th training loss raise ``exc``."""
    real, calls = trainer.task.loss, [0]

    def loss(model, batch, label_smoothing=0.0):
        calls[0] += 1
        if calls[0] == at_call:
            raise exc
        return real(model, batch, label_smoothing)

    trainer.task.loss = loss


@pytest.mark.parametrize(
    "exc",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
        ),
    ],
)
def test_out_of_memory_names_the_update_the_batch_and_the_fix(exc):
    trainer = Trainer(resolve_run(tiny(**{"train.valid_every": 100})), None, quiet=True)
    _fail(trainer, 3, exc)
    with pytest.raises(OutOfMemory) as info:
        trainer.fit()
    msg = str(info.value)
    assert "out of memory on cpu at update 3 in a microbatch of " in msg
    assert "src (" in msg and "y_in (" in msg  # the batch's tensors with their shapes
    assert str(exc).splitlines()[0][:40] in msg
    assert "train.batch.max_tokens" in msg and "train.accum_steps" in msg
    assert info.value.__cause__ is exc and "\n" not in msg


def test_other_runtime_errors_are_not_reworded():
    trainer = Trainer(resolve_run(tiny(**{"train.valid_every": 100})), None, quiet=True)
    _fail(trainer, 2, RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as info:
        trainer.fit()
    assert not isinstance(info.value, OutOfMemory)


def test_the_cli_prints_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    import yaml

    from seqlab.tasks import algorithmic

    def loss(self, model, batch, label_smoothing=0.0):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(algorithmic.AlgorithmicTask, "loss", loss)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("seqlab: error: out of memory on cpu at update 1")
