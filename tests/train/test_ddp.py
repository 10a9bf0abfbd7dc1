"""DDP on CPU (gloo) under torchrun: 2 processes × 1 microbatch == 1 process × 2 microbatches
on the same global batches; a missing rank is a clear error after the timeout, not a hang
(the CLI turns it into one line with exit code 2, as every SeqlabError)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqlab.run_config import resolve_run
from seqlab.train.build import build_model, build_task
from seqlab.train.distributed import DistributedError, init_distributed
from seqlab.train.rng import seed_everything
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny, write_preset

TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS = 6


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _model_tensors(run: Path) -> dict[str, torch.Tensor]:
    tensors = load_file(run / f"checkpoints/step-{STEPS:06d}/tensors.safetensors")
    return {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}


def test_two_ranks_equal_one_process_accumulating_two_microbatches(tmp_path):
    # Dropout off: each rank draws dropout masks from its own RNG stream, while one process
    # draws both microbatches' masks from one stream, so with dropout the two runs would
    # differ by design. What is compared is the loss normalisation and gradient sync.
    cfg = tiny(**{"model.dropout": 0.0, "train.max_steps": STEPS, "train.save_every": STEPS})
    cfg["train"]["valid_every"] = 100
    preset = write_preset(tmp_path / "tiny.yaml", cfg)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "-m", "seqlab", "train"]
    cmd += [str(preset), "--run-dir", str(tmp_path / "two"), "train.accum_steps=1"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:] + "\n--- stdout ---\n" + done.stdout[-1000:]
    assert "96 tokens/rank × 2 rank(s) × 1 accum = 192" in done.stdout
    assert done.stdout.count("seqlab: done") == 1  # rank 0 alone prints and writes

    one_cfg = resolve_run(preset, ["train.accum_steps=2"])
    Trainer(one_cfg, tmp_path / "one", quiet=True).fit()
    two, one = _model_tensors(tmp_path / "two"), _model_tensors(tmp_path / "one")
    assert two.keys() == one.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-5, rtol=0, msg=name)

    # Both really trained: far from the initial weights (same seed, same init).
    seed_everything(one_cfg.train.seed)
    init = build_model(one_cfg, build_task(one_cfg)).state_dict()
    moved = max(float((one[k] - init[k]).abs().max()) for k in one)
    assert moved > 1e-3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_never_joins_gives_a_clear_error(monkeypatch):
    # Rank 0 of 2 alone: the rendezvous must give up after SEQLAB_DIST_TIMEOUT, not hang.
    env = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    env.update(MASTER_PORT=str(_free_port()), SEQLAB_DIST_TIMEOUT="1")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(DistributedError) as info:
        init_distributed("cpu")
    message = str(info.value)
    assert message.startswith("rank 0/2: could not join the gloo process group")
    assert "SEQLAB_DIST_TIMEOUT" in message and "\n" not in message
    assert not torch.distributed.is_initialized()
