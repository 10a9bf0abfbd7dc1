"""How ``seqlab export`` flattens a decoder state into named tensors and back (a codec):
the dataclass fields as they are (the RNN encoder–decoders, the pointer-generator), or,
for ConvS2S, whose state holds a list and an int, these fields:

    z, z_plus_e (B, S, E)       keys and values of every attention (static)
    src_mask (B, S)             (an encoder input, read again by the step)
    buffer_<l> (B, k − 1, C)    decoder block l's last k − 1 inputs; zeros before the
                                first step, which is what ``GLUConvBlock.step`` takes None for
    steps (B, t)                zeros whose width t is the position of the next token, so a
                                traced step reads it as a size (the learned position p_t)

Shapes: as listed; B batch, S source length.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from seqlab.decode.state import is_static


class DataclassCodec:
    """A state dataclass of tensors (and int fields carried as sizes, ``sizes``)."""

    free_axes: dict[str, dict[int, str]] = {}  # field -> {axis: name}: sizes that change

    def fields(self, state: Any, sizes: frozenset[str] = frozenset()) -> dict[str, Tensor]:
        return {
            f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in sizes
        }

    def static(self, state: Any) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(state) if is_static(f))

    def state(self, cls: type, fields: dict[str, Tensor], sizes: dict[str, int]) -> Any:
        return cls(**fields, **sizes)


class ConvS2SCodec(DataclassCodec):
    """``ConvS2SState`` <-> z, z_plus_e, src_mask, buffer_<l>, steps (module doc)."""

    free_axes = {"steps": {1: "t"}}

    def __init__(self, model: Any) -> None:
        self.widths = [(b.kernel_size - 1, model.cfg.channels) for b in model.decoder_blocks]

    def fields(self, state: Any, sizes: frozenset[str] = frozenset()) -> dict[str, Tensor]:
        B = state.z.shape[0]
        out = {"z": state.z, "z_plus_e": state.z_plus_e, "src_mask": state.src_mask}
        for i, (buffer, (k1, C)) in enumerate(zip(state.buffers, self.widths, strict=True)):
            out[f"buffer_{i}"] = state.z.new_zeros(B, k1, C) if buffer is None else buffer
        out["steps"] = state.z.new_zeros(B, state.position)  # (B, t): the width is t
        return out

    def static(self, state: Any) -> frozenset[str]:
        return frozenset({"z", "z_plus_e", "src_mask"})

    def state(self, cls: type, fields: dict[str, Tensor], sizes: dict[str, int]) -> Any:
        buffers = [fields[f"buffer_{i}"] for i in range(len(self.widths))]
        return cls(
            z=fields["z"],
            z_plus_e=fields["z_plus_e"],
            src_mask=fields["src_mask"],
            buffers=buffers,
            position=fields["steps"].shape[1],  # a traced size
        )


def codec_of(model: Any, name: str) -> DataclassCodec:
    return ConvS2SCodec(model) if name == "convs2s" else DataclassCodec()
