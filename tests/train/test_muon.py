"""optim.name=muon: which parameters Muon gets, equality with torch's Muon + AdamW run
separately, the orthogonalised update of the docstring, schedules, and exact resume
through a seqlab checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.config import ConfigError
from seqlab.train.checkpoint import load_checkpoint, save_checkpoint
from seqlab.train.muon import BatchedMuon, MuonAdamW, muon_parameters
from seqlab.train.optim import OptimConfig, build_optimizer
from seqlab.train.schedules import build_schedule


class Net(nn.Module):
    """Embedding → Linear → LayerNorm → Linear(·, 1) gate and a tied output: every kind of
    parameter the split must place."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.proj = nn.Linear(8, 16)
        self.back = nn.Linear(16, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.v = nn.Linear(8, 1, bias=False)  # 1 × 8: a vector, not for Muon
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        h = self.norm(self.back(torch.relu(self.proj(self.embed(x)))))  # (B, T, 8)
        h = h * torch.sigmoid(self.v(h))  # (B, T, 8)
        return h @ self.embed.weight.T  # (B, T, 11), tied output


def _data(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randint(11, (4, 5), generator=g), torch.randint(11, (4, 5), generator=g))
        for _ in range(n)
    ]


def _train(model, opt, data, sched=None):
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x).reshape(-1, 11), y.reshape(-1)).backward()
        opt.step()
        if sched is not None:
            sched.step()


def test_muon_gets_the_linear_matrices_and_adamw_the_rest_each_once():
    model = Net()
    opt = build_optimizer(model, OptimConfig(name="muon", lr=0.01, weight_decay=0.1))
    assert isinstance(opt, MuonAdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {g["name"]: [names[id(p)] for p in g["params"]] for g in opt.param_groups}
    assert groups["muon"] == ["proj.weight", "back.weight"]
    on_adamw = sorted(n for name, ns in groups.items() if name != "muon" for n in ns)
    assert on_adamw == sorted(["embed.weight", "proj.bias", "norm.weight", "norm.bias", "v.weight"])
    decay = [names[id(p)] for g in opt.param_groups if g["name"] == "decay" for p in g["params"]]
    assert decay == ["v.weight"]  # embeddings, norms and biases are not decayed
    assert muon_parameters(model) == [model.proj.weight, model.back.weight]


def test_one_optimizer_equals_torch_muon_and_adamw_stepped_side_by_side():
    torch.manual_seed(0)
    model = Net()
    twin = copy.deepcopy(model)
    cfg = OptimConfig(name="muon", lr=0.02, weight_decay=0.1, betas=(0.9, 0.99), eps=1e-8)
    opt = build_optimizer(model, cfg)
    muon = torch.optim.Muon(
        [twin.proj.weight, twin.back.weight],
        lr=0.02,
        weight_decay=0.1,
        momentum=0.95,
        nesterov=True,
        adjust_lr_fn="match_rms_adamw",
    )
    adamw = torch.optim.AdamW(
        [
            {"params": [twin.v.weight]},
            {
                "params": [twin.embed.weight, twin.proj.bias, twin.norm.weight, twin.norm.bias],
                "weight_decay": 0.0,
            },
        ],
        lr=0.02,
        betas=(0.9, 0.99),
        eps=1e-8,
        weight_decay=0.1,
        fused=True,
    )
    for x, y in _data(5):
        for m, opts in ((model, [opt]), (twin, [muon, adamw])):
            for o in opts:
                o.zero_grad()
            F.cross_entropy(m(x).reshape(-1, 11), y.reshape(-1)).backward()
            for o in opts:
                o.step()
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p, q), n


def test_muon_step_is_the_scaled_orthogonalised_gradient():
    """First step, λ = 0: M = g, M̃ = g + μg, so ΔW = −η·0.2·√max(A, B)·NS₅(M̃), whose
    singular values NS₅ puts near 1 (Jordan et al.'s coefficients: within ~[0.7, 1.2])."""
    torch.manual_seed(0)
    lin = nn.Linear(12, 32, bias=False)
    w0 = lin.weight.detach().clone()
    opt = build_optimizer(lin, OptimConfig(name="muon", lr=0.01, weight_decay=0.0))
    lin(torch.randn(64, 12)).pow(2).sum().backward()
    g = lin.weight.grad.clone()
    opt.step()
    step = (w0 - lin.weight.detach()) / (0.01 * 0.2 * 32**0.5)  # (32, 12) ≈ NS₅(M̃)
    s = torch.linalg.svdvals(step)
    assert s.min() > 0.6 and s.max() < 1.3, s
    # Same singular vectors as the gradient: NS₅ maps UΣVᵀ to U f(Σ) Vᵀ (f is not
    # monotone, so compare in the gradient's basis, not sorted), up to bf16 rounding.
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    d = u.T @ step @ vh.T  # (12, 12), f(Σ) on the diagonal
    assert (d - torch.diag(torch.diagonal(d))).abs().max() < 0.05
    assert torch.diagonal(d).min() > 0.6 and torch.diagonal(d).max() < 1.3


def test_a_schedule_sets_the_rate_of_both_parts():
    model = Net()
    opt = build_optimizer(model, OptimConfig(name="muon", lr=0.1))
    sched = build_schedule(opt, "step", {"step_size": 1, "gamma": 0.5})
    _train(model, opt, _data(2), sched)
    assert [g["lr"] for g in opt.muon.param_groups] == [0.025]
    assert {g["lr"] for g in opt.adamw.param_groups} == {0.025}


def test_muon_resumes_bitwise_through_a_checkpoint(tmp_path):
    data = _data(8, seed=3)

    def fresh(seed):
        torch.manual_seed(seed)
        model = Net()
        opt = build_optimizer(model, OptimConfig(name="muon", lr=0.02, weight_decay=0.1))
        return model, opt, build_schedule(opt, "cosine", {"warmup": 2, "total_steps": 8})

    model, opt, sched = fresh(0)
    _train(model, opt, data[:4], sched)
    save_checkpoint(tmp_path / "c", model=model, optimizer=opt, scheduler=sched, step=4)
    _train(model, opt, data[4:], sched)

    model2, opt2, sched2 = fresh(1)
    load_checkpoint(tmp_path / "c", model=model2, optimizer=opt2, scheduler=sched2)
    # The inner optimizers see the restored groups and momentum buffers.
    assert opt2.muon.param_groups[0] is opt2.param_groups[0]
    assert opt2.muon.state is opt2.state and opt2.adamw.state is opt2.state
    _train(model2, opt2, data[4:], sched2)
    for (n, p), q in zip(model.named_parameters(), model2.parameters()):
        assert torch.equal(p, q), n  # bitwise, no tolerance


def test_muon_refuses_what_it_cannot_split():
    with pytest.raises(ConfigError, match="needs the model"):
        build_optimizer([nn.Parameter(torch.zeros(3, 3))], OptimConfig(name="muon"))
    with pytest.raises(ConfigError, match="no nn.Linear weight"):
        build_optimizer(nn.Embedding(5, 4), OptimConfig(name="muon"))
    with pytest.raises(ConfigError, match="muon_momentum"):
        OptimConfig(name="muon", muon_momentum=1.0)


def test_batched_newton_schulz_matches_torch_muon_per_matrix():
    """BatchedMuon stacks same-shaped gradients (here 4 square, 2 wide, 2 tall) into one
    Newton–Schulz call; after 4 steps the weights equal torch.optim.Muon's up to bf16
    rounding of the iteration (a tenth of one update)."""
    torch.manual_seed(0)
    shapes = [(8, 8)] * 4 + [(6, 10)] * 2 + [(10, 6)] * 2
    ours = [nn.Parameter(torch.randn(s)) for s in shapes]
    ref = [nn.Parameter(p.detach().clone()) for p in ours]
    kw = dict(lr=0.02, weight_decay=0.1, momentum=0.95, adjust_lr_fn="match_rms_adamw")
    opt, opt_ref = BatchedMuon(ours, **kw), torch.optim.Muon(ref, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        grads = [torch.randn(s, generator=g) for s in shapes]
        for params, o in ((ours, opt), (ref, opt_ref)):
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            o.step()
    for p, q, s in zip(ours, ref, shapes):
        step = 0.02 * 0.2 * max(s) ** 0.5  # one update's scale
        assert (p - q).abs().max() < 0.1 * step
    assert opt.state_dict()["state"][0]["momentum_buffer"].shape == (8, 8)
    assert torch.equal(
        opt.state[ours[5]]["momentum_buffer"], opt_ref.state[ref[5]]["momentum_buffer"]
    )
