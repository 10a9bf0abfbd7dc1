"""Checkpoints: exact round trips, resumed == uninterrupted (bitwise), no pickle, tied
weights, atomic writes, migrations, retention; RNG capture/restore; the fingerprint."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from seqlab.errors import CheckpointError
from seqlab.train import checkpoint as ckpt
from seqlab.train import fingerprint, rng
from seqlab.train.checkpoint import (
    MIGRATIONS,
    describe_checkpoint,
    keep_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint,
    restore_rng,
    save_checkpoint,
    step_name,
)
from seqlab.train.optim import OptimConfig, build_optimizer
from seqlab.train.schedules import build_schedule

V, D = 13, 8


class TiedLM(nn.Module):
    """Embedding → Linear → LayerNorm → dropout → output projection tied to the embedding."""

    def __init__(self, tie: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.hidden = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(D, V, bias=False)
        if tie:
            self.out.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.norm(torch.tanh(self.hidden(self.embed(x)))))  # (B, T, D)
        return self.out(h)  # (B, T, V)


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(123)
    return [
        (torch.randint(V, (4, 5), generator=g), torch.randint(V, (4, 5), generator=g))
        for _ in range(n)
    ]


def train(model, opt, sched, data) -> list[torch.Tensor]:
    """Plain loop; dropout draws from the global torch RNG, so resuming needs its state."""
    losses = []
    for x, y in data:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.detach())
    return losses


def make(name: str = "adam", seed: int = 0, tie: bool = True):
    torch.manual_seed(seed)
    model = TiedLM(tie)
    opt = build_optimizer(model, OptimConfig(name=name, lr=0.05, weight_decay=0.01))
    sched = build_schedule(opt, "cosine", {"warmup": 2, "total_steps": 20, "min_lr": 1e-3})
    return model, opt, sched


def assert_same(a, b, where="state"):
    """Exact structural equality: same types, tensors equal in dtype, shape and bits."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_adam_round_trip_then_training_continues_bitwise(tmp_path):
    data = batches(6)
    model, opt, sched = make("adam")
    train(model, opt, sched, data[:3])
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    path = save_checkpoint(
        tmp_path / step_name(3), model=model, optimizer=opt, scheduler=sched, step=3, epoch=1
    )
    ref_losses = train(model, opt, sched, data[3:])  # uninterrupted, RNG continues as saved

    model2, opt2, sched2 = make("adam", seed=99)  # different init: everything must come back
    meta = load_checkpoint(path, model=model2, optimizer=opt2, scheduler=sched2)
    restore_rng(meta)
    assert (meta.step, meta.epoch, meta.format_version) == (3, 1, 1)
    assert_same(dict(model2.state_dict()), saved_model)
    losses = train(model2, opt2, sched2, data[3:])
    assert_same(losses, ref_losses)  # bitwise (torch.equal), no tolerance
    assert_same(dict(model2.state_dict()), dict(model.state_dict()))
    assert_same(opt2.state_dict(), opt.state_dict())
    assert_same(sched2.state_dict(), sched.state_dict())


@pytest.mark.parametrize("name", ["sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"])
def test_every_optimizer_state_round_trips_exactly(tmp_path, name):
    data = batches(3)
    model, opt, sched = make(name)
    train(model, opt, sched, data[:2])
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, scheduler=sched, step=2)
    model2, opt2, sched2 = make(name, seed=5)
    restore_rng(load_checkpoint(tmp_path / "c", model=model2, optimizer=opt2, scheduler=sched2))
    assert_same(opt2.state_dict(), opt.state_dict())  # tuples stay tuples, step stays a tensor
    rng_now = torch.get_rng_state()
    train(model, opt, sched, data[2:])
    torch.set_rng_state(rng_now)
    train(model2, opt2, sched2, data[2:])
    assert_same(dict(model2.state_dict()), dict(model.state_dict()))


def test_config_sampler_tokenizer_extra_and_grad_scaler_round_trip(tmp_path):
    model, opt, _ = make()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    extra = {"best_bleu": 27.5, "mask": torch.tensor([True, False]), "pair": (1, "a")}
    sampler = {"epoch": 2, "position": 17, "order_seed": 5, "buckets": {3: [1, 2]}}
    save_checkpoint(
        tmp_path / "c",
        model=model,
        optimizer=opt,
        step=7,
        config=OptimConfig(name="adamw"),
        sampler_state=sampler,
        tokenizer_state={"kind": "char", "vocab": ["<pad>", "a"]},
        extra=extra,
        grad_scaler=scaler,
    )
    scaler2 = torch.amp.GradScaler("cpu")
    meta = load_checkpoint(tmp_path / "c", grad_scaler=scaler2)
    assert meta.config["name"] == "adamw" and meta.config["betas"] == [0.9, 0.999]
    assert_same(meta.sampler_state, sampler)
    assert meta.tokenizer_state == {"kind": "char", "vocab": ["<pad>", "a"]}
    assert_same(meta.extra, extra)
    assert scaler2.get_scale() == 1024.0 and scaler2.get_growth_interval() == 7
    assert meta.versions["torch"] == torch.__version__


def test_tied_weights_stored_once_and_stay_tied(tmp_path):
    model, opt, sched = make()
    train(model, opt, sched, batches(1))
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, step=1)
    stored = load_file(str(tmp_path / "c" / ckpt.TENSORS_FILE))
    meta = json.loads((tmp_path / "c" / ckpt.META_FILE).read_text())
    assert meta["aliases"] == {"model.out.weight": "model.embed.weight"}
    assert "model.out.weight" not in stored and "model.embed.weight" in stored

    tied, _, _ = make(seed=3)
    load_checkpoint(tmp_path / "c", model=tied)
    assert tied.out.weight is tied.embed.weight
    assert torch.equal(tied.embed.weight, model.embed.weight)
    untied = TiedLM(tie=False)  # same keys, separate tensors: both receive the matrix
    load_checkpoint(tmp_path / "c", model=untied)
    assert torch.equal(untied.out.weight, model.embed.weight)
    assert torch.equal(untied.embed.weight, model.embed.weight)


def test_overlapping_views_are_cloned_not_refused(tmp_path):
    model = nn.Linear(2, 2)
    base = torch.arange(6.0)
    save_checkpoint(tmp_path / "c", model=model, step=0, extra={"a": base[:4], "b": base[2:]})
    meta = load_checkpoint(tmp_path / "c")
    assert torch.equal(meta.extra["a"], base[:4]) and torch.equal(meta.extra["b"], base[2:])


def test_pickle_files_are_refused_without_unpickling(tmp_path, monkeypatch):
    model = nn.Linear(2, 2)
    torch.save(model.state_dict(), tmp_path / "model.pt")  # zip archive
    (tmp_path / "renamed").write_bytes((tmp_path / "model.pt").read_bytes())
    (tmp_path / "raw").write_bytes(pickle.dumps({"w": 1}, protocol=4))
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "pytorch_model.bin").write_bytes(b"\x80\x02junk")
    bad = tmp_path / "swapped"
    save_checkpoint(bad, model=model, step=0)
    (bad / ckpt.TENSORS_FILE).write_bytes((tmp_path / "model.pt").read_bytes())

    def forbidden(*args, **kwargs):
        raise AssertionError("the loader tried to unpickle")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(torch, "load", forbidden)
    for p in ["model.pt", "renamed", "raw", "hf", "swapped"]:
        with pytest.raises(CheckpointError, match="weights_only=True") as info:
            load_checkpoint(tmp_path / p, model=model)
        assert "without unpickling" in str(info.value) and "save_checkpoint" in str(info.value)


def test_missing_corrupt_and_newer_checkpoints_give_clear_errors(tmp_path):
    model = nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope")
    path = save_checkpoint(tmp_path / "c", model=model, step=0)
    meta_text = (path / ckpt.META_FILE).read_text()
    (path / ckpt.META_FILE).write_text(meta_text[:-20])
    with pytest.raises(CheckpointError, match="corrupt JSON"):
        load_checkpoint(path)
    (path / ckpt.META_FILE).write_text(
        meta_text.replace('"format_version": 1', '"format_version": 9')
    )
    with pytest.raises(CheckpointError, match="newer seqlab"):
        load_checkpoint(path)
    (path / ckpt.META_FILE).write_text(meta_text)
    data = (path / ckpt.TENSORS_FILE).read_bytes()
    (path / ckpt.TENSORS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot read tensors"):
        load_checkpoint(path)
    (path / ckpt.TENSORS_FILE).unlink()
    with pytest.raises(CheckpointError, match="tensors.safetensors is missing"):
        load_checkpoint(path)
    (path / ckpt.META_FILE).unlink()
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        load_checkpoint(path)


def test_wrong_model_or_optimizer_is_a_clear_error(tmp_path):
    model, opt, sched = make("adam")
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, scheduler=sched, step=0)
    with pytest.raises(CheckpointError, match="model keys differ"):
        load_checkpoint(tmp_path / "c", model=nn.Sequential(TiedLM(), nn.Identity()))
    wider = TiedLM()
    wider.hidden = nn.Linear(D, D + 1)  # same keys, other shape
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(tmp_path / "c", model=wider, strict=False)
    _, sgd, _ = make("sgd")
    with pytest.raises(CheckpointError, match="optimizer is a Adam"):
        load_checkpoint(tmp_path / "c", optimizer=sgd)
    lam = torch.optim.lr_scheduler.LambdaLR(sgd, lambda t: 1.0)
    with pytest.raises(CheckpointError, match="scheduler is a Schedule"):
        load_checkpoint(tmp_path / "c", scheduler=lam)


def test_failed_write_keeps_previous_checkpoint_and_leaves_no_temp(tmp_path, monkeypatch):
    model = nn.Linear(3, 3)
    path = save_checkpoint(tmp_path / "step-000001", model=model, step=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(path, model=model, step=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]
    restored = nn.Linear(3, 3)
    assert load_checkpoint(path, model=restored).step == 1
    assert_same(dict(restored.state_dict()), before)

    real_replace, calls = os.replace, []

    def second_rename_fails(src, dst):  # old → aside succeeds, new → in fails
        calls.append((src, dst))
        if len(calls) == 2:
            raise OSError(5, "I/O error")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="I/O error"):
        save_checkpoint(path, model=model, step=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]
    assert load_checkpoint(path).step == 1

    save_checkpoint(path, model=model, step=2)  # a successful replace of the same name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]
    assert load_checkpoint(path).step == 2


def _write_v0(path, model):
    """A hypothetical format 0: "global_step" instead of "step", no "model." prefix."""
    save_checkpoint(path, model=model, step=42)
    meta = json.loads((path / ckpt.META_FILE).read_text())
    meta["format_version"] = 0
    meta["global_step"] = meta.pop("step")
    (path / ckpt.META_FILE).write_text(json.dumps(meta))
    tensors = load_file(str(path / ckpt.TENSORS_FILE))
    old = {k.removeprefix("model."): v for k, v in tensors.items()}
    save_file(old, str(path / ckpt.TENSORS_FILE))


def _v0_to_v1(meta, tensors):
    meta = dict(meta, format_version=1, step=meta["global_step"])
    model_keys = [k for k in tensors if not k.startswith(("rng.", "optim.", "extra."))]
    tensors = {(f"model.{k}" if k in model_keys else k): v for k, v in tensors.items()}
    return meta, tensors


def test_old_format_loads_through_migration_chain(tmp_path, monkeypatch):
    model = nn.Linear(3, 2)
    _write_v0(tmp_path / "old", model)
    with pytest.raises(CheckpointError, match="no migration from it"):
        load_checkpoint(tmp_path / "old")
    monkeypatch.setitem(MIGRATIONS, 0, _v0_to_v1)
    fresh = nn.Linear(3, 2)
    meta = load_checkpoint(tmp_path / "old", model=fresh)
    assert meta.step == 42 and meta.format_version == 1
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)

    seen = []  # chain 0 → 1 → 2 when the current format is 2
    monkeypatch.setattr(ckpt, "FORMAT_VERSION", 2)
    monkeypatch.setitem(
        MIGRATIONS, 1, lambda m, t: (seen.append(1) or dict(m, format_version=2), t)
    )
    meta = load_checkpoint(tmp_path / "old", model=fresh)
    assert seen == [1] and meta.format_version == 2 and meta.step == 42


def test_keep_checkpoints_keeps_last_k_and_best(tmp_path):
    for s in [1, 2, 3, 10, 20]:
        (tmp_path / step_name(s)).mkdir()
    (tmp_path / "best").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    assert latest_checkpoint(tmp_path).name == "step-000020"
    deleted = keep_checkpoints(tmp_path, keep_last=2, best="step-000002")
    assert sorted(p.name for p in deleted) == ["step-000001", "step-000003"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["best", "notes.txt", "step-000002", "step-000010", "step-000020"]
    keep_checkpoints(tmp_path, keep_last=0, best="step-000002")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "notes.txt", "step-000002"]
    with pytest.raises(ValueError):
        keep_checkpoints(tmp_path, keep_last=-1)


def _draws():
    return (
        [random.random(), random.gauss(0, 1)],
        np.random.standard_normal(3).tolist(),
        torch.rand(3),
    )


def test_rng_capture_restore_gives_identical_draws_through_a_checkpoint(tmp_path, monkeypatch):
    random.gauss(0, 1)  # leaves a cached gauss_next in Python's state
    np.random.standard_normal(1)  # leaves has_gauss=1 in NumPy's legacy state
    model = nn.Linear(1, 1)  # (initialisation draws from torch's RNG)
    state = rng.capture_rng_state()
    save_checkpoint(tmp_path / "c", model=model, step=0)
    first = _draws()
    rng.restore_rng_state(state)
    assert_same(_draws(), first)
    rng.seed_everything(7)  # scramble everything, then restore through JSON + safetensors
    restore_rng(load_checkpoint(tmp_path / "c"))
    assert_same(_draws(), first)

    def no_cuda(*args, **kwargs):
        raise AssertionError("touched CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ["get_rng_state_all", "set_rng_state", "device_count", "init"]:
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    state = rng.capture_rng_state()
    assert state.json["cuda_devices"] == 0 and list(state.tensors) == ["torch_cpu"]
    assert len(state.json["python"]["words"]) == 625 * 8  # Mersenne-Twister words as hex
    json.dumps(state.json)
    # a state saved on a GPU machine: CPU generators restored, CUDA ones skipped with a warning
    state.tensors["torch_cuda.0"] = torch.zeros(16, dtype=torch.uint8)
    cpu_next = torch.rand(2)
    with pytest.warns(UserWarning, match="1 CUDA generator"):
        rng.restore_rng_state(state)
    assert torch.equal(torch.rand(2), cpu_next)


def test_seed_everything_is_one_seed_for_all_and_sets_determinism():
    rng.seed_everything(11)
    a = _draws()
    rng.seed_everything(11, deterministic=True)
    try:
        assert torch.are_deterministic_algorithms_enabled()
        assert_same(_draws(), a)
    finally:
        rng.seed_everything(11, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(ValueError):
        rng.seed_everything(-1)


def test_environment_fingerprint_is_json_and_tolerates_no_git(tmp_path, monkeypatch):
    fp = fingerprint.environment_fingerprint(seed=3, workdir=tmp_path)
    json.dumps(fp)
    assert fp["seed"] == 3 and fp["versions"]["torch"] == torch.__version__
    assert fp["git"] == {"commit": None, "dirty": None}  # tmp_path is no git checkout
    assert set(fp["cpu"]["flags"]) >= {"avx512_bf16", "amx_bf16"}
    assert fp["torch_threads"] == torch.get_num_threads()
    assert fp["cuda"] is None or fp["cuda"]["devices"]

    def fake_git(args, **kwargs):
        out = "ab" * 20 if args[1] == "rev-parse" else " M seqlab/x.py"
        return subprocess.CompletedProcess(args, 0, stdout=out + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_git)
    assert fingerprint.git_state(tmp_path) == {"commit": "ab" * 20, "dirty": True}


def test_read_and_describe_checkpoint(tmp_path):
    model, opt, sched = make()
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, scheduler=sched, step=5)
    meta, tensors = read_checkpoint(tmp_path / "c")
    assert meta["step"] == 5 and torch.equal(tensors["model.hidden.weight"], model.hidden.weight)
    assert tensors["rng.torch_cpu"].dtype == torch.uint8
    assert tensors["model.out.weight"] is tensors["model.embed.weight"]  # alias filled in
    text = describe_checkpoint(tmp_path / "c")
    assert "format 1, step 5" in text and "optimizer Adam" in text and "(cosine)" in text
    assert f"model.embed.weight{' ' * 22} F32   ({V}, {D})" in text
    assert "alias model.out.weight -> model.embed.weight" in text
    torch.save({"w": torch.ones(1)}, tmp_path / "x.pt")
    with pytest.raises(CheckpointError, match="weights_only"):
        describe_checkpoint(tmp_path / "x.pt")
