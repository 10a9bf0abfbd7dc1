"""``seqlab export``: a Transformer translation checkpoint as TorchScript — the encoder and
one decoder step with its state as explicit tensors — plus a reference greedy loop that
runs the exported step (``greedy_exported``), checked equal to eager decoding in
tests/serve/test_export.py.

Files written to ``out``:

    encoder.pt   (src (B, S) long, src_mask (B, S) bool)
                 -> memory (B, S, D), cross_k (L, B, H, S, Dh), cross_v (L, B, H, S, Dh)
    step.pt      (y_prev (B,) long, src_mask (B, S) bool, self_k (L, B, H, t, Dh),
                  self_v (L, B, H, t, Dh), cross_k, cross_v)
                 -> logits (B, V), self_k (L, B, H, t+1, Dh), self_v (L, B, H, t+1, Dh)
    export.json  model config, vocabulary sizes, BOS / EOS / PAD ids

The self-attention caches start empty (t = 0). Both files are traced
(``torch.jit.trace``); the cache length and the positional offset stay dynamic because
they are read from the cache's shape. Other model families (RNN seq2seq with attention
history, ConvS2S buffers) keep Python structures in their state and are refused with a
clear error; ONNX is not supported (the ``onnx`` package is not a dependency).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.errors import SeqlabError
from seqlab.nn.multihead import KVCache
from seqlab.nn.transformer_decoder import DecoderLayerState, TransformerDecoderState


class _Encoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        memory = self.model.encode(src, src_mask)  # (B, S, D)
        state = self.model.init_state(memory, src_mask)
        cross_k = torch.stack([layer.cross_kv.k for layer in state.layers])  # (L, B, H, S, Dh)
        cross_v = torch.stack([layer.cross_kv.v for layer in state.layers])  # (L, B, H, S, Dh)
        return memory, cross_k, cross_v


class _Step(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        y_prev: Tensor,
        src_mask: Tensor,
        self_k: Tensor,
        self_v: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        layers = [
            DecoderLayerState(KVCache(self_k[i], self_v[i]), KVCache(cross_k[i], cross_v[i]))
            for i in range(cross_k.size(0))
        ]
        logits, state = self.model.step(y_prev, TransformerDecoderState(layers, src_mask))
        new_k = torch.stack([layer.self_kv.k for layer in state.layers])  # (L, B, H, t+1, Dh)
        new_v = torch.stack([layer.self_kv.v for layer in state.layers])  # (L, B, H, t+1, Dh)
        return logits, new_k, new_v


def _check(loaded: Any, fmt: str) -> None:
    if fmt != "torchscript":
        raise SeqlabError(f"export --format {fmt}: not supported yet; use --format torchscript")
    if loaded.config.task != "translation" or loaded.config.model != "transformer":
        raise SeqlabError(
            f"export: a '{loaded.config.model}' model of task '{loaded.config.task}' cannot be "
            "exported: only Transformer translation checkpoints have an exportable decoder "
            "step (their state is plain tensors); serve the others with seqlab serve"
        )


def _examples(model: nn.Module) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs to trace with: a batch of 2 × 5 source tokens and a cache of 2 positions."""
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID]])  # (2, 5)
    src_mask = src != PAD_ID  # (2, 5)
    _, cross_k, cross_v = _Encoder(model)(src, src_mask)
    L, B, H, _, Dh = cross_k.shape
    self_kv = torch.zeros(L, B, H, 2, Dh)  # (L, B, H, 2, Dh)
    y = torch.tensor([BOS_ID, BOS_ID])  # (2,)
    return (src, src_mask), (y, src_mask, self_kv, self_kv.clone(), cross_k, cross_v)


@torch.no_grad()
def export(loaded: Any, out: str | Path, fmt: str = "torchscript") -> list[Path]:
    """Write ``encoder.pt``, ``step.pt`` and ``export.json`` to ``out``; their paths."""
    _check(loaded, fmt)
    model = loaded.model.eval().cpu()
    enc_inputs, step_inputs = _examples(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # shape checks in the layers become constants of the trace; the test proves the
        # traced step equal to the eager one at other batch sizes and cache lengths
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13: TorchScript too
        encoder = torch.jit.trace(_Encoder(model), enc_inputs, check_trace=False)
        step = torch.jit.trace(_Step(model), step_inputs, check_trace=False)
    paths = [out / "encoder.pt", out / "step.pt", out / "export.json"]
    encoder.save(str(paths[0]))
    step.save(str(paths[1]))
    meta = {
        "format": "torchscript",
        "model": loaded.config.model,
        "config": loaded.config.to_dict()["model"],
        "vocab_sizes": {k: v for k, v in loaded.task.model_kwargs().items() if k != "pad_id"},
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_id": PAD_ID,
    }
    paths[2].write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return paths


@torch.no_grad()
def greedy_exported(
    encoder: Any, step: Any, src: Tensor, src_mask: Tensor, max_len: int
) -> tuple[Tensor, Tensor]:
    """Reference greedy loop over the exported step: tokens (B, T) (PAD after EOS) and
    log P (B,). Shapes: src, src_mask (B, S)."""
    _, cross_k, cross_v = encoder(src, src_mask)
    L, B, H, _, Dh = cross_k.shape
    self_k = self_v = cross_k.new_zeros(L, B, H, 0, Dh)  # (L, B, H, 0, Dh)
    y = torch.full((B,), BOS_ID, dtype=torch.long)  # (B,)
    done = torch.zeros(B, dtype=torch.bool)  # (B,)
    tokens, log_p = [], torch.zeros(B)
    for _ in range(max_len):
        logits, self_k, self_v = step(y, src_mask, self_k, self_v, cross_k, cross_v)  # (B, V)
        lp = torch.log_softmax(logits.float(), -1)  # (B, V)
        y = lp.argmax(-1)  # (B,)
        log_p += torch.where(done, 0.0, lp.gather(1, y[:, None])[:, 0])  # (B,)
        tokens.append(torch.where(done, PAD_ID, y))
        done |= y == EOS_ID
        if bool(done.all()):
            break
    return torch.stack(tokens, 1), log_p  # (B, T), (B,)
