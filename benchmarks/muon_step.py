"""One Muon step: ``torch.optim.Muon`` (one Newton–Schulz iteration per matrix) against
``seqlab.train.muon.BatchedMuon`` (one per group of same-shaped matrices).

    python benchmarks/muon_step.py [--models nanogpt,multi30k] [--reps 7] [--steps 20]
        [--threads 2]

The matrices are those ``optim.name=muon`` gives Muon (``muon_parameters``) in
``nanogpt``, the character Transformer LM at nanoGPT's CPU size (4 layers, width 128:
24 matrices, 3 shapes), and ``multi30k``, the Transformer of
configs/multi30k-transformer.yaml (d 256, 3 + 3 layers: 66 matrices). Every matrix gets a
fixed random gradient; both optimizers start from the same weights and step ``--steps``
times per repetition, back to back, the order alternating every repetition.

Printed per model: ms per step of each (median over ``--reps``), the speed-up as the
median of the paired ratios, and the largest difference between the two optimizers'
weights after the first repetition, in units of one update (η·0.2·√max(A, B)): bf16
rounding of the iteration, not a different rule.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_models as pm  # noqa: E402
from seqlab.models.transformer_lm import TransformerLM, TransformerLMConfig  # noqa: E402
from seqlab.train.muon import BatchedMuon, muon_parameters  # noqa: E402

LR = 4e-3
OPTIONS = {"lr": LR, "weight_decay": 0.1, "adjust_lr_fn": "match_rms_adamw"}


def build(name: str) -> nn.Module:
    if name == "nanogpt":
        cfg = TransformerLMConfig(d_model=128, n_heads=4, d_ff=512, layers=4, context=64)
        return TransformerLM(cfg, 66)
    if name == "multi30k":
        return pm.build_seqlab(pm.SMALL)[0]
    raise SystemExit(f"--models: unknown model {name!r} (nanogpt, multi30k)")


def timed(opt: torch.optim.Optimizer, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t0) / steps * 1e3  # ms / step


def measure(name: str, args: argparse.Namespace) -> str:
    torch.manual_seed(0)
    mats = muon_parameters(build(name))
    shapes = sorted({tuple(p.shape) for p in mats})
    copies = {
        kind: [nn.Parameter(p.detach().clone()) for p in mats] for kind in ("torch", "batched")
    }
    for p, q in zip(copies["torch"], copies["batched"]):  # the same gradient in both
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    opts = {
        "torch": torch.optim.Muon(copies["torch"], **OPTIONS),
        "batched": BatchedMuon(copies["batched"], **OPTIONS),
    }
    for o in opts.values():  # warm-up, and the first comparison of the weights
        o.step()
    worst = max(
        float((p - q).detach().abs().max()) / (LR * 0.2 * max(p.shape) ** 0.5)
        for p, q in zip(copies["torch"], copies["batched"])
    )
    times: dict[str, list[float]] = {"torch": [], "batched": []}
    ratios = []
    for rep in range(args.reps):
        order = ("torch", "batched") if rep % 2 == 0 else ("batched", "torch")
        got = {k: timed(opts[k], args.steps) for k in order}
        for k, v in got.items():
            times[k].append(v)
        ratios.append(got["torch"] / got["batched"])
        print(f"{name} rep {rep + 1}: torch {got['torch']:.2f} ms, batched {got['batched']:.2f} ms")
    t, b = (statistics.median(times[k]) for k in ("torch", "batched"))
    return (
        f"| {name} | {len(mats)} | {len(shapes)} | {t:.2f} | {b:.2f} "
        f"| {statistics.median(ratios):.2f}× | {worst:.3f} |"
    )


def main(argv: list[str] | None = None) -> list[str]:
    """Run the comparison, print and return the markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="nanogpt,multi30k")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [
        "| model | matrices | shapes | torch.optim.Muon ms / step | BatchedMuon ms / step "
        "| speed-up (median of paired reps) | max weight difference (updates) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows += [measure(m, args) for m in args.models.split(",")]
    print(f"{args.reps} reps of {args.steps} steps, {args.threads} threads")
    print("\n".join(rows))
    return rows


if __name__ == "__main__":
    main()
