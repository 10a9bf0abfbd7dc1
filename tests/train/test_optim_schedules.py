"""Optimizers by name, weight-decay groups, gradient clipping, LR schedules (golden values,
shape of the curves, counting) and schedule + optimizer through a checkpoint."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.config import ConfigError, resolve
from seqlab.registry import SCHEDULES
from seqlab.train.checkpoint import load_checkpoint, save_checkpoint
from seqlab.train.optim import OptimConfig, build_optimizer, clip_grad_norm, param_groups
from seqlab.train.schedules import (
    ConstantConfig,
    CosineConfig,
    InverseSqrtConfig,
    StepConfig,
    budget_total_steps,
    build_schedule,
    constant_lr,
    cosine_lr,
    inverse_sqrt_lr,
    step_lr,
)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 7)
        self.out.weight = self.embed.weight  # tied
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.out(self.norm(self.proj(self.embed(x))))  # (B, T, V)


@pytest.mark.parametrize(
    "name, cls, check",
    [
        ("sgd", torch.optim.SGD, {"momentum": 0.0}),
        ("momentum", torch.optim.SGD, {"momentum": 0.8}),
        ("adagrad", torch.optim.Adagrad, {"eps": 1e-7}),
        ("rmsprop", torch.optim.RMSprop, {"alpha": 0.95, "eps": 1e-7}),
        ("adam", torch.optim.Adam, {"betas": (0.8, 0.9), "eps": 1e-7}),
        ("adamw", torch.optim.AdamW, {"betas": (0.8, 0.9), "weight_decay": 0.1}),
    ],
)
def test_build_optimizer_maps_names_to_torch(name, cls, check):
    cfg = OptimConfig(
        name=name, lr=0.01, momentum=0.8, alpha=0.95, betas=(0.8, 0.9), eps=1e-7, weight_decay=0.1
    )
    opt = build_optimizer(Tiny(), cfg)
    assert type(opt) is cls
    decay = opt.param_groups[0]
    assert decay["name"] == "decay" and decay["lr"] == 0.01
    for key, value in check.items():
        assert decay[key] == value, key


def test_decay_groups_exclude_bias_norm_and_embedding_and_dedupe_tied():
    model = Tiny()
    groups = param_groups(model, weight_decay=0.1, exclude_norm_bias=True)
    names = {id(p): n for n, p in model.named_parameters()}
    got = {g["name"]: sorted(names[id(p)] for p in g["params"]) for g in groups}
    assert got == {
        "decay": ["proj.weight"],
        "no_decay": ["embed.weight", "norm.bias", "norm.weight", "out.bias", "proj.bias"],
    }  # out.weight is embed.weight: once, excluded; frozen.* not trainable
    assert groups[1]["weight_decay"] == 0.0
    single = param_groups(model, weight_decay=0.1, exclude_norm_bias=False)
    assert [g["name"] for g in single] == ["all"] and len(single[0]["params"]) == 6
    bare = param_groups(
        [torch.zeros(3, 3, requires_grad=True), torch.zeros(3, requires_grad=True)],
        weight_decay=0.1,
        exclude_norm_bias=True,
    )
    assert [len(g["params"]) for g in bare] == [1, 1]
    with pytest.raises(ConfigError, match="no trainable parameters"):
        build_optimizer(nn.Linear(2, 2).requires_grad_(False), OptimConfig())


def test_adamw_decay_is_decoupled_and_skips_excluded_params():
    """First AdamW step, m̂ = g, v̂ = g²: θ₁ = θ₀ − ηλθ₀ − η g / (|g| + ε) on decayed
    parameters and θ₁ = θ₀ − η g / (|g| + ε) on excluded ones (float64, atol 1e-12)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2)).double()
    eta, lam, eps = 0.1, 0.5, 1e-8
    opt = build_optimizer(model, OptimConfig(name="adamw", lr=eta, weight_decay=lam, eps=eps))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.randn(4, 3, dtype=torch.float64)).pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    for n, p in model.named_parameters():
        g, t0 = grads[n], before[n]
        decay = lam if n == "0.weight" else 0.0
        expected = t0 - eta * decay * t0 - eta * g / (g.abs() + eps)
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_fused_adam_fast_path_equals_the_loop_implementation(name):
    """build_optimizer picks PyTorch's fused Adam/AdamW kernel on CPU; 20 steps of it equal
    20 steps of the per-parameter loop (foreach=False) from the same start (float64, atol
    1e-12), with weight decay and bias correction in play."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 3)).double()
    twin = copy.deepcopy(model)
    cfg = OptimConfig(name=name, lr=0.01, weight_decay=0.1, betas=(0.9, 0.98))
    opt = build_optimizer(model, cfg)
    assert opt.defaults["fused"] is True
    ref_cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    ref = ref_cls(
        param_groups(twin, 0.1, True),
        lr=0.01,
        betas=(0.9, 0.98),
        eps=cfg.eps,
        weight_decay=0.1,
        foreach=False,
    )
    for _ in range(20):
        x = torch.randn(6, 5, dtype=torch.float64)
        for m, o in ((model, opt), (twin, ref)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


def test_optim_config_validates_and_parses_from_overrides():
    cfg = resolve(OptimConfig, overrides=["name=adamw", "betas=[0.9, 0.98]", "lr=0.0005"])
    assert cfg.betas == (0.9, 0.98) and cfg.name == "adamw" and cfg.lr == 0.0005
    with pytest.raises(ConfigError, match="not one of"):
        resolve(OptimConfig, overrides=["name=lion"])
    for bad in [{"lr": -1.0}, {"momentum": 1.0}, {"eps": 0.0}, {"betas": (0.9, 1.0)}]:
        with pytest.raises(ConfigError):
            OptimConfig(**bad)


def test_clip_grad_norm_returns_the_pre_clip_norm():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([0.0, 4.0])  # ‖g‖ = 5
    assert clip_grad_norm([a, b], None).item() == 5.0
    assert torch.equal(a.grad, torch.tensor([3.0, 0.0]))  # measuring does not clip
    assert clip_grad_norm([a, b], 1.0).item() == 5.0
    total = torch.cat([a.grad, b.grad]).norm()
    torch.testing.assert_close(total, torch.tensor(1.0), rtol=0, atol=1e-5)  # eps 1e-6 inside
    assert clip_grad_norm([a, b], None, norm_type=math.inf).item() == pytest.approx(0.8, abs=1e-6)


def test_vaswani_golden_values():
    """Vaswani 2017 eq. 3 with d_model = 512, warmup = 4000 (rel 1e-12 to the closed forms)."""
    cfg = InverseSqrtConfig(warmup=4000, d_model=512)
    peak = inverse_sqrt_lr(4000, 123.0, cfg)  # the optimizer's lr is ignored
    assert peak == pytest.approx(1 / math.sqrt(512 * 4000), rel=1e-12)
    assert peak == pytest.approx(6.98771e-4, rel=1e-5)
    assert inverse_sqrt_lr(1, 1.0, cfg) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    assert inverse_sqrt_lr(16000, 1.0, cfg) == pytest.approx(peak / 2, rel=1e-12)
    assert inverse_sqrt_lr(2000, 1.0, cfg) == pytest.approx(peak / 2, rel=1e-12)
    scaled = dataclasses.replace(cfg, scale=2.0)
    assert inverse_sqrt_lr(4000, 1.0, scaled) == pytest.approx(2 * peak, rel=1e-12)
    lrs = [inverse_sqrt_lr(t, 1.0, cfg) for t in range(1, 20001)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == 4000
    assert all(x < y for x, y in zip(lrs[:3999], lrs[1:4000]))  # rising in warmup
    assert all(x >= y for x, y in zip(lrs[3999:], lrs[4000:]))  # then falling


def test_fairseq_constant_step_and_cosine_golden_values():
    fs = InverseSqrtConfig(warmup=4000, variant="fairseq")
    assert inverse_sqrt_lr(2000, 5e-4, fs) == pytest.approx(2.5e-4, rel=1e-12)
    assert inverse_sqrt_lr(4000, 5e-4, fs) == pytest.approx(5e-4, rel=1e-12)
    assert inverse_sqrt_lr(16000, 5e-4, fs) == pytest.approx(2.5e-4, rel=1e-12)
    warm = ConstantConfig(warmup=10)
    assert [constant_lr(t, 1.0, warm) for t in (1, 5, 10, 11, 1000)] == [0.1, 0.5, 1, 1, 1]
    assert constant_lr(1, 0.3, ConstantConfig()) == 0.3
    st = StepConfig(step_size=3, gamma=0.5)
    assert [step_lr(t, 1.0, st) for t in range(1, 8)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    cos = CosineConfig(warmup=10, total_steps=110, min_lr=0.1)
    assert cosine_lr(5, 1.0, cos) == 0.5 and cosine_lr(10, 1.0, cos) == 1.0
    assert cosine_lr(60, 1.0, cos) == pytest.approx(0.55, rel=1e-12)  # p = ½
    assert cosine_lr(110, 1.0, cos) == pytest.approx(0.1, rel=1e-12)
    assert cosine_lr(500, 1.0, cos) == pytest.approx(0.1, rel=1e-12)
    after = [cosine_lr(t, 1.0, cos) for t in range(10, 200)]
    assert all(x >= y for x, y in zip(after, after[1:]))


def test_registry_entries_configs_and_errors():
    assert {"constant", "step", "inverse_sqrt", "cosine"} <= set(SCHEDULES.names())
    assert SCHEDULES.get("inverse_sqrt").config_cls is InverseSqrtConfig
    with pytest.raises(dataclasses.FrozenInstanceError):
        InverseSqrtConfig().warmup = 1  # type: ignore[misc]
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
    with pytest.raises(KeyError, match="Did you mean: cosine"):
        build_schedule(opt, "cosin")
    with pytest.raises(ConfigError, match="unknown key 'warmpu'"):
        build_schedule(opt, "constant", {"warmpu": 3})
    with pytest.raises(ConfigError, match="total_steps > warmup"):
        build_schedule(opt, "cosine")
    with pytest.raises(ConfigError, match="takes a StepConfig"):
        build_schedule(opt, "step", ConstantConfig())
    with pytest.raises(ConfigError, match="gamma"):
        StepConfig(gamma=0.0)


def test_schedule_counts_updates_from_one():
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
    sched = build_schedule(opt, "step", StepConfig(step_size=2, gamma=0.1))
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])  # the lr update t is taken with
        opt.step()
        sched.step()
    assert seen == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01], rel=1e-12)
    assert sched.last_epoch == 5


def test_schedule_state_warns_when_resumed_with_another_curve():
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0)
    state = build_schedule(opt, "constant", {"warmup": 4}).state_dict()
    other = build_schedule(opt, "constant", {"warmup": 8})
    with pytest.warns(UserWarning, match="learning-rate curve differs"):
        other.load_state_dict(state)


def _run(model, opt, sched, data):
    for x, y in data:
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        clip_grad_norm(model, 1.0)
        opt.step()
        sched.step()


@pytest.mark.parametrize("name, cfg", [("inverse_sqrt", {"warmup": 3}), ("step", {"step_size": 2})])
def test_schedule_and_optimizer_survive_a_checkpoint_bitwise(tmp_path, name, cfg):
    g = torch.Generator().manual_seed(1)
    data = [
        (torch.randint(7, (3, 4), generator=g), torch.randint(7, (3, 4), generator=g))
        for _ in range(8)
    ]

    def fresh(seed):
        torch.manual_seed(seed)
        model = Tiny()
        opt = build_optimizer(model, OptimConfig(name="adamw", lr=0.01, weight_decay=0.1))
        return model, opt, build_schedule(opt, name, cfg)

    model, opt, sched = fresh(0)
    _run(model, opt, sched, data[:4])
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, scheduler=sched, step=4)
    _run(model, opt, sched, data[4:])

    model2, opt2, sched2 = fresh(1)
    load_checkpoint(tmp_path / "c", model=model2, optimizer=opt2, scheduler=sched2)
    assert sched2.last_epoch == 4
    _run(model2, opt2, sched2, data[4:])
    for (n, p), p2 in zip(model.named_parameters(), model2.parameters()):
        assert torch.equal(p, p2), n  # bitwise, no tolerance
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]


def test_cosine_fitted_to_a_time_budget_keeps_its_T_in_the_state():
    """total_steps 0: warmup as usual, then T is fixed once (``set_total_steps``) and the
    curve is the plain cosine with that T; a JSON round trip of the state restores T into
    a fresh schedule built from the same (T = 0) config, with no warning."""
    assert budget_total_steps(10, 0.5, 100.0, warmup=10) == 210  # 10 + 100 / 0.5
    assert budget_total_steps(10, 1.0, 0.0, warmup=10) == 11  # no time left: warmup + 1
    cfg = CosineConfig(warmup=4, total_steps=0)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = build_schedule(opt, "cosine", cfg)
    assert sched.fits_budget
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [0.5, 1.0, 1.5]  # warmup needs no T
    sched.set_total_steps(14)
    assert not sched.fits_budget
    sched.step()  # lr(5): the first decayed value
    fitted = dataclasses.replace(cfg, total_steps=14)
    assert opt.param_groups[0]["lr"] == cosine_lr(5, 2.0, fitted)
    state = json.loads(json.dumps(sched.state_dict()))

    opt2 = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    again = build_schedule(opt2, "cosine", cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again.load_state_dict(state)
    assert not again.fits_budget and again.cfg.total_steps == 14
    for t in range(6, 20):
        sched.step()
        again.step()
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == cosine_lr(t, 2.0, fitted)
    assert cosine_lr(9, 2.0, fitted) == pytest.approx(1.0, rel=1e-12)  # p = ½ halfway to T
    with pytest.raises(ConfigError, match="total_steps 0 is fitted"):
        cosine_lr(5, 2.0, cfg)  # past the warmup with no T


@pytest.mark.parametrize("norm_type", [1.0, 2.0, math.inf])
def test_measured_grad_norm_is_the_norm_of_all_gradients_concatenated(norm_type):
    g = torch.Generator().manual_seed(0)
    params = [torch.zeros(shape, requires_grad=True) for shape in [(3, 4), (5,), (2, 2, 2)]]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    flat = torch.cat([p.grad.flatten() for p in params])  # the definition
    want = torch.linalg.vector_norm(flat, norm_type)
    torch.testing.assert_close(clip_grad_norm(params, None, norm_type), want)
    torch.testing.assert_close(clip_grad_norm(params, 1e9, norm_type), want)  # clipping path
