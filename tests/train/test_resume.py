"""Exact resume: N steps, stop (or kill -9), resume to 2N == 2N uninterrupted, bitwise on
CPU fp32 with dropout on — model, optimizer state and data order included."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqlab.errors import SeqlabError
from seqlab.run_config import resolve_run
from seqlab.train.checkpoint import step_name
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny, write_preset


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _tensors(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / step_name(step) / "tensors.safetensors")


def _assert_bitwise_equal(a: Path, b: Path, step: int) -> None:
    ta, tb = _tensors(a, step), _tensors(b, step)
    weights = [k for k in ta if k.startswith(("model.", "optim."))]
    assert any(k.startswith("optim.") for k in weights)
    assert set(ta) == set(tb)
    for key in weights:
        assert torch.equal(ta[key], tb[key]), key  # bitwise: atol = rtol = 0


def test_stop_then_resume_equals_uninterrupted_with_accumulation(tmp_path):
    # 400 examples ≈ 30 batches an epoch; 2 per step: the resumed half crosses an epoch.
    over = {"train.accum_steps": 2, "train.valid_every": 7, "train.log_every": 3}
    Trainer(
        resolve_run(tiny(**over, **{"train.max_steps": 40})), tmp_path / "full", quiet=True
    ).fit()
    Trainer(
        resolve_run(tiny(**over, **{"train.max_steps": 20})), tmp_path / "half", quiet=True
    ).fit()
    summary = Trainer.resume(tmp_path / "half", ["train.max_steps=40"], quiet=True).fit()
    assert summary["step"] == 40 and summary["epoch"] >= 1
    _assert_bitwise_equal(tmp_path / "full", tmp_path / "half", 40)

    def records(run):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]

    full, half = records(tmp_path / "full"), records(tmp_path / "half")
    assert [e["event"] for e in half].count("resume") == 1

    # Same training curve (log windows and validations are resumed too); elapsed differs.
    # The stopped half also logged its partial window at step 20 (not a multiple of 3).
    def curve(events):
        return [
            {k: v for k, v in e.items() if k not in ("elapsed", "tokens_per_s")}
            for e in events
            if e["event"] == "valid"
            or (e["event"] == "train" and e["step"] in (*range(3, 40, 3), 40))
        ]

    assert curve(half) == curve(full)

    with pytest.raises(SeqlabError, match="only train"):
        Trainer.resume(tmp_path / "half", ["model.d_model=32"])
    with pytest.raises(SeqlabError, match="no checkpoints/step"):
        Trainer.resume(tmp_path)


def test_kill_9_then_resume_equals_uninterrupted(tmp_path):
    N = 60  # the second half must outlast the poll below (≈20 ms a step here)
    preset = tiny(**{"train.max_steps": 2 * N, "train.save_every": N, "train.valid_every": 25})
    preset_path = write_preset(tmp_path / "tiny.yaml", preset)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = [sys.executable, "-m", "seqlab", "train"]

    def start(run: str) -> subprocess.Popen:
        cmd = [*train, str(preset_path), "--run-dir", str(tmp_path / run)]
        with open(tmp_path / f"{run}.log", "w") as log:  # the child keeps its own handle
            return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

    full, victim = start("full"), start("victim")
    ckpts = tmp_path / "victim" / "checkpoints"
    deadline = time.monotonic() + 120
    while not (ckpts / step_name(N)).exists():
        assert victim.poll() is None, (tmp_path / "victim.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert victim.poll() is None, "the run finished before it could be killed"
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    assert not (ckpts / step_name(2 * N)).exists()

    resumed = subprocess.run(
        [*train, "--resume", str(tmp_path / "victim")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed at step {N}" in resumed.stdout
    assert full.wait(timeout=120) == 0, (tmp_path / "full.log").read_text()
    _assert_bitwise_equal(tmp_path / "full", tmp_path / "victim", 2 * N)
