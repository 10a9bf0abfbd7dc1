"""Position information for attention models, which are otherwise order-blind.

Two kinds, both *added* to the token embeddings:

* ``SinusoidalPositionalEncoding`` — Vaswani et al. 2017, §3.5, fixed (no parameters):

      PE(pos, 2i)   = sin(pos / 10000^{2i/d_model})
      PE(pos, 2i+1) = cos(pos / 10000^{2i/d_model})

  For every offset k, PE(pos+k) = M_k · PE(pos) with M_k block-diagonal, one 2×2
  rotation by k·ω_i per pair (2i, 2i+1), ω_i = 10000^{−2i/d_model}; so relative position
  is a linear function of the encoding (``offset_rotation``; tested in
  tests/nn/test_positional.py, measured by seqlab/inspect/positional_offset.py).

* ``LearnedPositionalEmbedding`` — one trained vector per absolute position, as in
  ConvS2S (Gehring et al. 2017, §3.1) and BERT (Devlin et al. 2019, §3); it cannot go
  past the ``max_len`` it was built with.

The multiplication of the token embeddings by √d_model (Vaswani 2017, §3.4) is the
model's business, not this module's: do it in the model before adding the positions.

Both take an ``offset`` so an incremental decoder that has already produced ``offset``
tokens adds the encoding of positions offset … offset+T−1 to its new input.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqlab.nn.dropout import Dropout


def sinusoidal_table(
    n_positions: int,
    d_model: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The table PE of Vaswani et al. 2017, §3.5, for positions 0 … n_positions−1.

        PE(pos, 2i)   = sin(pos · ω_i),   PE(pos, 2i+1) = cos(pos · ω_i),
        ω_i = 10000^{−2i/d_model} = exp(−(2i/d_model) · ln 10000).

    Computed in float64 and then cast, so float32 tables are exact to rounding even for
    large pos·ω_i.

    Deviations: for odd d_model (the paper's d_model is even) the last column is the sine
    of the last pair and has no cosine partner.

    Shapes:
        returns: (n_positions, d_model)
    """
    if n_positions < 0 or d_model <= 0:
        raise ValueError(f"need n_positions >= 0 and d_model > 0, got {n_positions}, {d_model}")
    pos = torch.arange(n_positions, dtype=torch.float64, device=device)  # (P,)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (ceil(D/2),)
    omega = torch.exp(-(two_i / d_model) * math.log(10000.0))  # (ceil(D/2),)
    angle = pos[:, None] * omega[None, :]  # (P, ceil(D/2))
    PE = torch.empty(n_positions, d_model, dtype=torch.float64, device=device)  # (P, D)
    PE[:, 0::2] = torch.sin(angle)  # (P, ceil(D/2))
    PE[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # (P, floor(D/2))
    return PE.to(dtype)  # (P, D)


def offset_rotation(k: int, d_model: int) -> Tensor:
    """M_k: one 2×2 rotation by k·ω_i per pair (2i, 2i+1), float64.

        M_k[2i:2i+2, 2i:2i+2] = [[cos kω_i, sin kω_i], [−sin kω_i, cos kω_i]]

    For odd d_model the last (unpaired sine) column has no exact linear map; it is left 0.
    Shapes: → (d_model, d_model)
    """
    M = torch.zeros(d_model, d_model, dtype=torch.float64)  # (D, D)
    for i in range(d_model // 2):
        omega = 10000.0 ** (-2 * i / d_model)
        c, s = math.cos(k * omega), math.sin(k * omega)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
    return M


class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[offset : offset+T], then dropout (Vaswani et al. 2017, §3.5 and §5.4).

    The table is a non-persistent buffer: it is regenerated from the formula, is not in
    ``state_dict`` (checkpoints do not carry it), and is rebuilt larger, in place, when a
    forward needs positions past its current length (``max_len`` is only the initial
    size, not a limit).

    §5.4: "we apply dropout to the sums of the embeddings and the positional encodings".
    Scaling the embeddings by √d_model (§3.4) is done by the model, before this layer.

    Deviations: none (the table is added in the input's dtype).

    Shapes:
        x:       (B, T, D)
        offset:  int, position of x[:, 0] (tokens already decoded)
        returns: (B, T, D)
    """

    def __init__(self, d_model: int, max_len: int = 1024, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = d_model
        self.dropout = Dropout(dropout)
        PE = sinusoidal_table(max_len, d_model)  # (max_len, D)
        self.register_buffer("PE", PE, persistent=False)
        self.PE: Tensor

    def table(self, n_positions: int) -> Tensor:
        """PE for positions 0 … n_positions−1, growing the buffer if needed.  (P, D)."""
        if n_positions > self.PE.size(0):
            # Grow geometrically so a decoder stepping past max_len rebuilds O(log T) times.
            size = max(n_positions, 2 * self.PE.size(0))
            self.PE = sinusoidal_table(size, self.d_model, self.PE.dtype, self.PE.device)
        return self.PE[:n_positions]  # (P, D)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(f"expected last dim d_model={self.d_model}, got {x.size(-1)}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        T = x.size(1)
        PE = self.table(offset + T)[offset:]  # (T, D)
        return self.dropout(x + PE.to(x.dtype))  # (B, T, D)


class LearnedPositionalEmbedding(nn.Module):
    """x + P[offset : offset+T] with a trained table P (Gehring et al. 2017 §3.1; BERT).

    One parameter vector per absolute position 0 … max_len−1; positions at or past
    max_len have no vector and raise ``IndexError``.

    Deviations: initialised N(0, 0.02²) as in BERT; ConvS2S initialises N(0, 0.1²).

    Shapes:
        x:       (B, T, D)
        offset:  int, position of x[:, 0]
        returns: (B, T, D)
    """

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.P = nn.Parameter(torch.empty(max_len, d_model))  # (max_len, D)
        self.dropout = Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.P, mean=0.0, std=0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(f"expected last dim d_model={self.d_model}, got {x.size(-1)}")
        T = x.size(1)
        if offset < 0 or offset + T > self.max_len:
            raise IndexError(
                f"positions {offset}..{offset + T - 1} exceed the learned table "
                f"(max_len={self.max_len}); build the layer with a larger max_len"
            )
        return self.dropout(x + self.P[offset : offset + T])  # (B, T, D)
