"""``seqlab export`` of the decoder-only Transformer language model (``transformer_lm``),
and the file read back as a model of the LM contract (``seqlab.serve.export_lm`` has the
recurrent LMs and the shared loader).

One graph reads T new tokens after t cached ones and returns their logits and the caches
grown by T positions:

    lm  (x (B, T) long, k (L, B, H, t, Dh), v (L, B, H, t, Dh))
        -> logits (B, T, V), k_out (L, B, H, t + T, Dh), v_out (L, B, H, t + T, Dh)

B, T and t dynamic; the positions of the new tokens are t … t + T − 1, read from the
cache's length (so t + T ≤ ``model.context``, the position table's size: checked before
each call, as the eager model checks it). Generation calls it with T = 1; scoring with T =
the text's length and t = 0. ``ExportedTransformerLM`` keeps the eager model's state
(``TransformerLMState``: per-layer caches and the tokens read) and its sliding window:
once t reaches the context, the last context − 1 tokens are re-encoded from empty caches
before the next token (``TransformerLM.step``). TorchScript files are traced; ONNX files
come from ``torch.onnx.export(dynamo=True)`` with B, T and t declared dynamic.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput
from seqlab.models.transformer_lm import TransformerLMState
from seqlab.nn.multihead import KVCache

TRANSFORMER_LM = "transformer_lm"
IO = (["x", "k", "v"], ["logits", "k_out", "v_out"])


class _Chunk(nn.Module):
    """(x, k, v) -> (logits, k_out, v_out) through ``TransformerLM.forward`` with caches."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        tokens = x.new_zeros(x.size(0), k.size(3))  # (B, t): only its width (the offset) is read
        layers = [KVCache(k[i], v[i]) for i in range(k.size(0))]
        out = self.model(x, TransformerLMState(layers, tokens))  # logits (B, T, V)
        k_out = torch.stack([kv.k for kv in out.state.layers])  # (L, B, H, t+T, Dh)
        v_out = torch.stack([kv.v for kv in out.state.layers])  # (L, B, H, t+T, Dh)
        return out.logits, k_out, v_out


def write_transformer_lm(model: nn.Module, fmt: str, path: Path) -> dict[str, Any]:
    """Write the chunk graph of ``model`` (eval mode, CPU) to ``path``; its "lm" entry."""
    from seqlab.serve.export_lm import write_graph

    cfg = model.cfg
    L, H, Dh = len(model.layers), cfg.n_heads, cfg.d_model // cfg.n_heads
    cache = torch.zeros(L, 2, H, 2, Dh)  # B = 2, t = 2
    inputs = (torch.ones(2, 3, dtype=torch.long), cache, cache.clone())  # T = 3
    # the context check and the mask's shape become constants of the trace; the tests
    # prove the file equal to the eager model at other B, T and t
    dims = {"x": {0: "B", 1: "T"}, "k": {1: "B", 3: "t"}, "v": {1: "B", 3: "t"}}
    write_graph(_Chunk(model).eval(), inputs, fmt, path, IO, dims)
    return {"inputs": IO[0], "outputs": IO[1], "layers": L, "heads": H, "head_dim": Dh,
            "context": cfg.context, "files": {"chunk": path.name}}  # fmt: skip


class ExportedTransformerLM(nn.Module):
    """The exported chunk graph as a Transformer LM (module doc).  ``run``: the loaded
    file, a callable of tensors returning a tuple; ``meta``: its ``export.json``."""

    def __init__(self, run: Any, meta: dict[str, Any]) -> None:
        super().__init__()
        self.run, self.meta = run, meta
        lm = meta["lm"]
        self.L, self.H, self.Dh = lm["layers"], lm["heads"], lm["head_dim"]
        self.cfg = SimpleNamespace(context=lm["context"])  # what prime() reads
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> TransformerLMState:
        """Nothing read yet: empty caches (B, H, 0, Dh) and no tokens (B, 0)."""
        empty = torch.zeros(batch_size, self.H, 0, self.Dh)  # (B, H, 0, Dh)
        tokens = torch.zeros(batch_size, 0, dtype=torch.long)  # (B, 0)
        return TransformerLMState([KVCache(empty, empty) for _ in range(self.L)], tokens)

    def forward(self, x: Tensor, state: TransformerLMState | None = None) -> LMOutput:
        """x (B, T) after ``state`` (None: from nothing, and no state returned, as the
        eager model) -> logits (B, T, V), the state after."""
        given = state
        if state is None:
            state = self.init_state(x.size(0))
        offset, T = state.length, x.size(1)
        if offset + T > self.cfg.context:
            raise ValueError(
                f"positions {offset}…{offset + T - 1} exceed the context of "
                f"{self.cfg.context} (model.context): feed at most {self.cfg.context} tokens"
            )
        k = torch.stack([kv.k for kv in state.layers]).contiguous()  # (L, B, H, t, Dh)
        v = torch.stack([kv.v for kv in state.layers]).contiguous()  # (L, B, H, t, Dh)
        logits, k_out, v_out = self.run(x.contiguous(), k, v)
        if given is None:
            return LMOutput(logits, None)
        layers = [KVCache(k_out[i], v_out[i]) for i in range(self.L)]
        return LMOutput(logits, TransformerLMState(layers, torch.cat([state.tokens, x], 1)))

    def step(
        self, x: Tensor, state: TransformerLMState | None
    ) -> tuple[Tensor, TransformerLMState]:
        """One token after the cached ones; past the context, a sliding window.  x (B,)."""
        if state is None:
            state = self.init_state(x.size(0))
        if state.length >= self.cfg.context:
            window = state.tokens[:, -(self.cfg.context - 1) :]  # (B, context − 1)
            state = self.forward(window, self.init_state(x.size(0))).state
        out = self.forward(x[:, None], state)
        return out.logits[:, 0], out.state  # (B, V)
