"""Dot-product vs additive attention at equal size (Vaswani et al. 2017, §3.2.1: "dot-product
attention is much faster and more space-efficient in practice, since it can be
implemented using highly optimized matrix multiplication code").

Both are ``seqlab.nn.attention.Attention`` with queries and keys of width D:

    dot        e_ij = q_iᵀ k_j                      one (T, D)·(D, S) matmul: T·S·D MACs
    additive   e_ij = vₐᵀ tanh(Wₐ q_i + Uₐ k_j)     A = D: (T + S)·D² for the projections,
                                                    then a (B, T, S, A) tensor: T·S·A adds,
                                                    tanh and multiplies, not a matmul

so the FLOP counts are of the same order (T·S·D); the difference is that the additive
score materialises B·T·S·A elements and runs element-wise kernels over them.

:func:`attention_times` measures forward and forward + backward wall time (median of
``repeats`` after a warm-up) over source lengths S with T = S; :func:`speed_record`
sweeps S and reports the additive/dot ratio. Timings are wall-clock: noisy on a busy CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seqlab.inspect.complexity import median_seconds
from seqlab.nn.attention import Attention

SCORES = ("dot", "additive")


def attention_times(
    score: str, B: int, T: int, S: int, D: int, repeats: int = 5, seed: int = 0
) -> dict[str, float]:
    """Seconds for one forward and one forward + backward of ``Attention(D, D, score)``
    (attn_dim A = D for additive) on query (B, T, D), keys = values (B, S, D)."""
    torch.manual_seed(seed)
    layer = Attention(D, D, score, attn_dim=D)  # type: ignore[arg-type]
    q = torch.randn(B, T, D, requires_grad=True)  # (B, T, D)
    k = torch.randn(B, S, D, requires_grad=True)  # (B, S, D)

    @torch.no_grad()
    def forward() -> None:
        layer(q, k)

    def forward_backward() -> None:
        context, _ = layer(q, k)  # (B, T, D)
        context.sum().backward()

    return {
        "forward_s": median_seconds(forward, repeats),
        "forward_backward_s": median_seconds(forward_backward, repeats),
    }


def speed_record(
    lengths: Sequence[int] = (16, 32, 64, 128, 256),
    D: int = 128,
    B: int = 8,
    repeats: int = 5,
) -> dict[str, Any]:
    """Both scores at every S (T = S, width D, batch B), with additive / dot ratios."""
    rows = []
    for S in lengths:
        times = {score: attention_times(score, B, S, S, D, repeats) for score in SCORES}
        rows.append(
            {
                "S": S,
                **{f"{score}_{k}": v for score in SCORES for k, v in times[score].items()},
                "ratio_forward": times["additive"]["forward_s"] / times["dot"]["forward_s"],
                "ratio_forward_backward": times["additive"]["forward_backward_s"]
                / times["dot"]["forward_backward_s"],
            }
        )
    return {"D": D, "B": B, "repeats": repeats, "rows": rows}


def speed_table(record: dict[str, Any]) -> str:
    """Markdown table of :func:`speed_record` (milliseconds)."""
    from seqlab.inspect.figures import markdown_table

    header = [
        "T = S",
        "dot fwd ms",
        "additive fwd ms",
        "additive / dot",
        "dot fwd+bwd ms",
        "additive fwd+bwd ms",
        "additive / dot",
    ]
    rows = [
        [
            r["S"],
            f"{r['dot_forward_s'] * 1e3:.2f}",
            f"{r['additive_forward_s'] * 1e3:.2f}",
            f"{r['ratio_forward']:.1f}×",
            f"{r['dot_forward_backward_s'] * 1e3:.2f}",
            f"{r['additive_forward_backward_s'] * 1e3:.2f}",
            f"{r['ratio_forward_backward']:.1f}×",
        ]
        for r in record["rows"]
    ]
    return markdown_table(header, rows)


def plot_speed(record: dict[str, Any], path: str | Path) -> Path:
    """Log-log time against T = S for both scores, forward and forward + backward."""
    from seqlab.inspect.figures import figure, line_panel, save_png

    S = [r["S"] for r in record["rows"]]
    curves = {
        f"{score} {what}": (S, [r[f"{score}_{key}"] for r in record["rows"]])
        for score in SCORES
        for what, key in (("forward", "forward_s"), ("fwd+bwd", "forward_backward_s"))
    }
    fig = figure(6, 4)
    title = f"Attention, D = A = {record['D']}, batch {record['B']}"
    line_panel(fig.add_subplot(1, 1, 1), curves, "T = S", "seconds", title, logx=True)
    return save_png(fig, path)
