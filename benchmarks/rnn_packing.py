"""What packing the fused kernel's weights saves (seqlab/nn/recurrent_packed.py; issue 11).

Three variants of peers.py's recurrent workload (benchmarks/peers_rnn.py: 2 layers, input
256, hidden 512, 35 steps, batch 64, forward + backward), timed round-robin in one process:

* ``packed``: seqlab's ``Recurrent`` as shipped (on a GPU: one buffer in cuDNN's layout);
* ``assembled``: the same module with ``pack_weights = False`` (the list of slices and cats
  that cuDNN copies on every call);
* ``nn``: ``nn.LSTM`` / ``nn.GRU``.

On a CPU packing is off, so ``packed`` and ``assembled`` run the same code (a control for
the noise).  Prints a table of ms per step and the ratios packed / assembled and packed / nn;
``--json`` writes them.

    python benchmarks/rnn_packing.py --device cuda
    python benchmarks/rnn_packing.py --device cuda --kinds lstm --precisions bf16 --reps 9
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers_rnn as prnn  # noqa: E402
from benchmarks.peers_timing import round_robin  # noqa: E402

VARIANTS = ("packed", "assembled", "nn")


def build(variant: str, kind: str, shape: prnn.RNNShape) -> torch.nn.Module:
    module = prnn.build_rnn("nn" if variant == "nn" else "seqlab", kind, shape)
    if variant == "assembled":
        module.pack_weights = False  # type: ignore[assignment]
    return module


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--kinds", default="lstm,gru")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=16, help="forward + backward per repetition")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    shape = prnn.RNNShape(2, 8, 16, 5, 4) if args.tiny else prnn.RNNShape()
    rows = []
    for kind in args.kinds.split(","):
        for precision in args.precisions.split(","):
            variants = {
                v: prnn.rnn_rep(build(v, kind, shape), shape, precision, args.steps,
                                device=args.device)
                for v in VARIANTS
            }  # fmt: skip
            t = round_robin(variants, args.reps, warmup=2, device=args.device)
            ms = {v: 1000 * t[v].median_s / args.steps for v in VARIANTS}
            rows.append({"kind": kind, "precision": precision, "ms": ms,
                         "cv": {v: t[v].cv for v in VARIANTS}})  # fmt: skip
    print(f"device {args.device}, {shape}, {args.steps} steps x {args.reps} reps (median)")
    print("| kind | precision | packed ms | assembled ms | nn ms | speed vs assembled | vs nn |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ms = r["ms"]
        gain, vs_nn = ms["assembled"] / ms["packed"], ms["nn"] / ms["packed"]
        print(
            f"| {r['kind']} | {r['precision']} | {ms['packed']:.2f} | {ms['assembled']:.2f} | "
            f"{ms['nn']:.2f} | {gain:.2f}x | {vs_nn:.2f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
