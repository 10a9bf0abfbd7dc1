"""The sinusoidal encoding's linear-offset property (Vaswani et al. 2017, §3.5: "for any
fixed offset k, PE_{pos+k} can be represented as a linear function of PE_pos"), measured.

With ω_i = 10000^{−2i/d_model} and the pair (PE(pos, 2i), PE(pos, 2i+1)) =
(sin pos·ω_i, cos pos·ω_i), the angle-addition formulas give

    [sin (pos+k)ω_i]   [ cos kω_i   sin kω_i] [sin pos·ω_i]
    [cos (pos+k)ω_i] = [−sin kω_i   cos kω_i] [cos pos·ω_i]        PE(pos+k) = M_k PE(pos)

M_k (``seqlab.nn.positional.offset_rotation``) is block-diagonal, orthogonal and depends on
k only. Measured here: (1) M_k predicts PE(pos+k) from PE(pos) to rounding at every pos;
(2) a map fitted by least squares from the table alone (no formula assumed) predicts as
well — it need not equal M_k entry by entry, because the slowest frequencies barely move
over the table (pos·ω_i ≪ 1), so the columns are nearly dependent and the fit not unique;
(3) PE(pos)·PE(pos+k) = Σ_i cos kω_i depends on k only, not on pos.

Shapes: offset_rotation → (D, D); the record's arrays are lists over the offsets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqlab.nn.positional import offset_rotation, sinusoidal_table


def fitted_offset_map(PE: Tensor, k: int) -> Tensor:
    """Least-squares M with PE[pos + k] ≈ M PE[pos] over every pos of the table.

    Shapes: PE (P, D) float64 with P − k ≥ D → M (D, D)
    """
    X, Y = PE[:-k] if k else PE, PE[k:]  # (P − k, D) each
    # SVD-based driver: the table is numerically rank-deficient (condition number ~1e17),
    # where the default QR driver ("gelsy") can return a poor solution.
    return torch.linalg.lstsq(X, Y, driver="gelsd").solution.T  # (D, D): Y ≈ X Mᵀ


def offset_record(
    d_model: int = 64, positions: int = 512, offsets: Sequence[int] = (1, 2, 5, 10, 50, 100)
) -> dict[str, Any]:
    """Per offset k: max |PE(pos+k) − M_k PE(pos)| (float64 table, and the float32 table
    the models use), the same for the least-squares map, and the spread over pos of
    PE(pos)·PE(pos+k)."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for the exact rotation, got {d_model}")
    if max(offsets) + d_model >= positions:
        raise ValueError(f"need positions > max offset + d_model = {max(offsets) + d_model}")
    PE = sinusoidal_table(positions, d_model, dtype=torch.float64)  # (P, D)
    PE32 = sinusoidal_table(positions, d_model).double()  # (P, D) float32 values
    rows = []
    for k in offsets:
        M = offset_rotation(k, d_model)  # (D, D)
        err64 = (PE[:-k] @ M.T - PE[k:]).abs().max()
        err32 = (PE32[:-k] @ M.T - PE32[k:]).abs().max()
        fit_err = (PE[:-k] @ fitted_offset_map(PE, k).T - PE[k:]).abs().max()
        dots = (PE[:-k] * PE[k:]).sum(-1)  # (P − k,): PE(pos)·PE(pos+k)
        expected = sum(math.cos(k * 10000.0 ** (-2 * i / d_model)) for i in range(d_model // 2))
        rows.append(
            {
                "k": k,
                "max_error_float64": float(err64),
                "max_error_float32_table": float(err32),
                "max_error_fitted_map": float(fit_err),
                "orthogonality_error": float(
                    (M @ M.T - torch.eye(d_model, dtype=M.dtype)).abs().max()
                ),
                "dot_expected": expected,
                "dot_spread_over_pos": float(dots.max() - dots.min()),
            }
        )
    return {"d_model": d_model, "positions": positions, "offsets": rows}


def offset_table(record: dict[str, Any]) -> str:
    """Markdown table of :func:`offset_record`."""
    from seqlab.inspect.figures import markdown_table

    header = [
        "k",
        "max|PE(pos+k) − M_k PE(pos)| (float64)",
        "… float32 table",
        "… least-squares map",
        "Σ cos kω_i",
        "spread of PE(pos)·PE(pos+k) over pos",
    ]
    rows = [
        [
            r["k"],
            f"{r['max_error_float64']:.1e}",
            f"{r['max_error_float32_table']:.1e}",
            f"{r['max_error_fitted_map']:.1e}",
            f"{r['dot_expected']:.3f}",
            f"{r['dot_spread_over_pos']:.1e}",
        ]
        for r in record["offsets"]
    ]
    return markdown_table(header, rows)


def plot_offsets(record: dict[str, Any], path: str | Path) -> Path:
    """Three panels: the PE table; PE(pos)·PE(pos+k) against k for several pos (one curve
    if the property holds); |PE(pos+k) − M_k PE(pos)| against pos for the largest k."""
    from seqlab.inspect.figures import figure, save_png

    D, P = record["d_model"], record["positions"]
    PE = sinusoidal_table(P, D, dtype=torch.float64)  # (P, D)
    fig = figure(13, 4)
    ax = fig.add_subplot(1, 3, 1)
    ax.imshow(PE[:128].numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    ax.set_title(f"PE(pos, j), d_model = {D}", fontsize=9)
    ax.set_xlabel("dimension j", fontsize=8)
    ax.set_ylabel("pos", fontsize=8)
    ax = fig.add_subplot(1, 3, 2)
    ks = torch.arange(0, min(100, P // 2))  # offsets shown; pos + k stays inside the table
    for pos in (0, P // 8, P // 4, P // 2 - 1):
        dots = (PE[pos] * PE[pos + ks]).sum(-1)  # (K,)
        ax.plot(ks.numpy(), dots.numpy(), label=f"pos = {pos}", linewidth=3 if pos == 0 else 1)
    ax.set_title("PE(pos)·PE(pos+k) depends on k only", fontsize=9)
    ax.set_xlabel("offset k", fontsize=8)
    ax.legend(fontsize=7)
    k = record["offsets"][-1]["k"]
    ax = fig.add_subplot(1, 3, 3)
    err = (PE[:-k] @ offset_rotation(k, D).T - PE[k:]).abs().amax(-1)  # (P − k,)
    ax.semilogy(err.clamp_min(1e-18).numpy())
    ax.set_title(f"max_j |PE(pos+{k}) − M_{k} PE(pos)|, float64", fontsize=9)
    ax.set_xlabel("pos", fontsize=8)
    return save_png(fig, path)
