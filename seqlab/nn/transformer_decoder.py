"""Transformer decoder layer and stack, teacher-forced and incremental (K/V-cached).

Vaswani et al. 2017, §3.1: each decoder layer has three sublayers — masked
self-attention (position i sees positions ≤ i, §3.2.3), encoder–decoder attention
(queries from the layer below, keys and values from the encoder output "memory"), and
the position-wise FFN — each wrapped by ``ResidualSublayers`` (post-norm as in the
paper, or pre-norm).

Incremental decoding: the self-attention keys/values of positions already decoded do not
change when a new position is appended (causal mask), so each layer caches them
(``DecoderLayerState.self_kv`` grows by one position per step) and the encoder–decoder
keys/values are projected once from the memory (``cross_kv``). ``step`` then costs
O(t) per position instead of re-running O(t²). tests/nn/test_transformer_decoder.py
proves cached step decoding == the teacher-forced forward with a causal mask. The
self-attention cache is the plain ``KVCache``, grown by concatenation, until beam search
expands the rows to K hypotheses per input; from there it is a ``TreeKVCache``
(seqlab/nn/tree_kv_cache.py: written in place, and beam search reorders its hypotheses
without copying it). ``cache="concat"`` / ``"tree"`` force one of the two throughout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from torch import Tensor, nn

from seqlab.decode.state import reorder_fields, static_field
from seqlab.nn.masks import attention_mask, causal_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention
from seqlab.nn.row_packing import PaddedRows
from seqlab.nn.transformer import Activation, FeedForward, ResidualSublayers
from seqlab.nn.tree_kv_cache import TreeKVCache, repeat_factor

# The self-attention cache of incremental decoding (``TransformerDecoderLayer.init_state``).
SelfCache = Literal["auto", "tree", "concat"]
# (α_self (B, H, T, T), α_cross (B, H, T, S)) of one decoder layer.
LayerWeights = tuple[Tensor, Tensor]


@dataclass
class DecoderLayerState:
    """One decoder layer's caches for incremental decoding.

    ``cross_kv`` is static (``seqlab.decode.state.static_field``): the same for every
    hypothesis of an input, so beam search does not copy it when it reorders.

    Shapes:
        self_kv:  keys/values of the t positions decoded so far: TreeKVCache (B rows, t
                  positions; seqlab.nn.tree_kv_cache) or KVCache (B, H, t, Dh)
        cross_kv: KVCache (B, H, S, Dh), keys/values of the memory (computed once)
    """

    self_kv: KVCache | TreeKVCache
    cross_kv: KVCache = static_field()

    def reorder(self, index: Tensor, within_inputs: bool = False) -> DecoderLayerState:
        """Keep batch rows ``index`` (B',) — beam search's surviving hypotheses
        (``cross_kv`` kept as it is when ``within_inputs``, see ``reorder_state``)."""
        return reorder_fields(self, index, within_inputs)


@dataclass
class TransformerDecoderState:
    """The decoder stack's state between ``step`` calls.

    ``memory_mask`` is static, like each layer's ``cross_kv``.

    Shapes:
        layers:      N DecoderLayerState
        memory_mask: (B, S) bool, True = real source token, or None
        weights:     of the last step, per layer (α_self (B, H, T', t), α_cross
                     (B, H, T', S)) when ``step(..., need_weights=True)``, else None
        cache:       "auto": each layer's KVCache becomes a TreeKVCache when beam search
                     expands the rows (``reorder``); "tree" or "concat": that cache
                     throughout (``TransformerDecoderLayer.init_state``)
    """

    layers: list[DecoderLayerState]
    memory_mask: Tensor | None = static_field()
    weights: list[LayerWeights] | None = None
    cache: SelfCache = "auto"

    @property
    def length(self) -> int:
        """t, the number of positions decoded so far (the positional-encoding offset)."""
        return self.layers[0].self_kv.length

    def reorder(self, index: Tensor, within_inputs: bool = False) -> TransformerDecoderState:
        """Keep batch rows ``index`` (B',) in every cache, mask and weight (static ones
        kept as they are when ``within_inputs``, see ``seqlab.decode.reorder_state``).

        With ``cache="auto"``, repeating every row K > 1 times (``repeat_rows``, beam
        search's expansion; checked once for all layers) turns each layer's concatenating
        cache into a ``TreeKVCache``, which ``TreeKVCache.reorder`` groups and beam search's
        later reorders do not copy; greedy search and sampling keep the ``KVCache``, which
        is faster for them (docs/perf-notes-measured.md §24), and so does a cache on a GPU,
        where the tree's extra operators cost more than its copies save (perf-notes-gpu.md
        §30).
        """
        state = self
        own = self.layers[0].self_kv if self.layers else None
        # On a GPU the concatenating cache stays (SDPA over it; the tree's extra operators
        # cost more there than its copies save: docs/perf-notes-gpu.md §30).
        concat = isinstance(own, KVCache)
        if self.cache == "auto" and concat and own.k.device.type == "cpu" and not within_inputs:
            times = repeat_factor(index, own.k.shape[0])
            if times is not None and times > 1:
                layers = [
                    DecoderLayerState(TreeKVCache.from_cache(lay.self_kv), lay.cross_kv)
                    for lay in self.layers
                ]
                state = dataclasses.replace(self, layers=layers)
        return reorder_fields(state, index, within_inputs)

    def ready(self, T_new: int = 1) -> TransformerDecoderState:
        """Every layer's ``TreeKVCache.ready``: buffers that appending T' positions may
        write in place. For a compiled step, which cannot run it inside its graph."""
        layers = [
            DecoderLayerState(lay.self_kv.ready(T_new), lay.cross_kv)
            if isinstance(lay.self_kv, TreeKVCache)
            else lay
            for lay in self.layers
        ]
        return dataclasses.replace(self, layers=layers)

    def written(self) -> None:
        """Every layer's ``TreeKVCache.written``, after a compiled step."""
        for lay in self.layers:
            if isinstance(lay.self_kv, TreeKVCache):
                lay.self_kv.written()


class TransformerDecoderLayer(ResidualSublayers):
    """One decoder layer, Vaswani 2017 §3.1 (post-norm shown; pre-norm: ResidualSublayers).

        a = MultiHead(y, y, y)              masked: position i sees j ≤ i (§3.2.3)
        y ← LayerNorm(y + Dropout(a))
        c = MultiHead(y, memory, memory)    encoder–decoder attention, memory padding masked
        y ← LayerNorm(y + Dropout(c))
        y ← LayerNorm(y + Dropout(FFN(y)))

    Parameter names follow ``torch.nn.TransformerDecoderLayer`` where they can
    (``self_attn``, ``cross_attn`` = its ``multihead_attn``, ``norm1..3``; its
    linear1/linear2 are ``ffn.W_1``/``ffn.W_2``).

    Deviations: dropout also on attention weights and FFN hidden units (tensor2tensor);
    ``norm_first=True`` is the pre-norm variant, not the paper.

    Shapes:
        y:           (B, T, D)
        memory:      (B, S, D)
        self_mask:   bool, True = keep, broadcastable to (B, H, T, T), e.g. (B, 1, T, T)
                     from ``attention_mask(tgt_mask, causal_mask(T))``
        memory_mask: bool, True = keep, broadcastable to (B, H, T, S), e.g. (B, 1, 1, S)
        returns:     y (B, T, D); (α_self (B, H, T, T), α_cross (B, H, T, S)) or None
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: Activation = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__(dropout, norm_first)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, LayerWeights | None]:
        cross_kv = self.cross_attn.project_kv(memory, memory)  # (B, H, S, Dh)
        y, _, weights = self.sublayers(
            y, None, cross_kv, self_mask, memory_mask, need_weights, rows
        )
        return y, weights

    def init_state(self, memory: Tensor, cache: SelfCache = "auto") -> DecoderLayerState:
        """Empty self-attention cache (t = 0) and the memory's projected keys/values.

        ``cache``: "concat" (``KVCache``: a new tensor per step, the reference), "tree"
        (``TreeKVCache``: written in place, reordered by beam search without a copy), or
        "auto" (concat here; ``TransformerDecoderState.reorder`` switches to tree at beam
        search's expansion).
        """
        B = memory.size(0)
        H, Dh = self.self_attn.n_heads, self.self_attn.d_k
        empty = memory.new_zeros(B, H, 0, Dh)  # (B, H, 0, Dh)
        if cache not in ("auto", "tree", "concat"):
            raise ValueError(f"cache must be 'auto', 'tree' or 'concat', got {cache!r}")
        own = TreeKVCache.empty(empty) if cache == "tree" else KVCache(empty, empty)
        return DecoderLayerState(own, self.cross_attn.project_kv(memory, memory))

    def step(
        self,
        y_new: Tensor,
        state: DecoderLayerState,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderLayerState, LayerWeights | None]:
        """Decode T' new positions (usually 1) after the t cached ones.

        Shapes: y_new (B, T', D); memory_mask broadcastable to (B, H, T', S)
                -> y (B, T', D), state with self_kv (B, H, t+T', Dh), weights or None.
        """
        T_new, t = y_new.size(1), state.self_kv.length
        # One new position may see every cached one; several need the shifted causal band.
        self_mask = None
        if T_new > 1:
            self_mask = causal_mask(T_new, t + T_new, y_new.device)  # (T', t+T')
        y, self_kv, weights = self.sublayers(
            y_new, state.self_kv, state.cross_kv, self_mask, memory_mask, need_weights
        )
        return y, DecoderLayerState(self_kv, state.cross_kv), weights

    def sublayers(
        self,
        y: Tensor,
        past_kv: KVCache | TreeKVCache | None,
        cross_kv: KVCache,
        self_mask: Tensor | None,
        memory_mask: Tensor | None,
        need_weights: bool,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, KVCache | TreeKVCache, LayerWeights | None]:
        """The three wrapped sublayers; ``past_kv`` holds earlier positions' self K/V;
        with ``rows`` (``PaddedRows``, teacher forcing), y is the real positions alone,
        (N, D), and so is the output.

        Shapes: y (B, T, D), past_kv (B, H, t, Dh) or None -> y (B, T, D),
                self K/V (B, H, t+T, Dh), weights or None.
        """
        h = self.sublayer_in(y, self.norm1)  # (B, T, D)
        q, self_kv = self.self_attn.project_qkv(h, rows)  # (B, H, T, Dh) each
        if isinstance(past_kv, TreeKVCache):
            self_kv = past_kv.append(self_kv)  # t+T positions, written in place
        elif past_kv is not None:
            self_kv = past_kv.cat(self_kv)  # (B, H, t+T, Dh)
        # a (B, T, D), α_self (B, H, T, t+T) or None
        a, alpha_self = self.self_attn.attend_heads(q, self_kv, self_mask, need_weights, rows)
        y = self.sublayer_out(y, a, self.norm1)  # (B, T, D)

        h = self.sublayer_in(y, self.norm2)  # (B, T, D)
        # c (B, T, D), α_cross (B, H, T, S) or None
        c, alpha_cross = self.cross_attn.attend(h, cross_kv, memory_mask, need_weights, rows)
        y = self.sublayer_out(y, c, self.norm2)  # (B, T, D)

        h = self.sublayer_in(y, self.norm3)  # (B, T, D)
        y = self.sublayer_out(y, self.ffn(h), self.norm3)  # (B, T, D)
        weights = (alpha_self, alpha_cross) if need_weights else None
        return y, self_kv, weights


class TransformerDecoder(nn.Module):
    """A stack of N decoder layers (Vaswani 2017 §3.1), teacher-forced or step by step.

    Takes the already embedded and position-encoded target (shifted right by the model).
    ``forward`` applies the causal mask itself; ``init_state`` + ``step`` decode
    incrementally with per-layer K/V caches and give the same outputs.

    Deviations: with ``norm_first=True`` a final LayerNorm follows the last layer (the
    standard pre-norm stack); with the paper's post-norm there is none. ``step`` has no
    target padding mask (every decoded position is kept).

    Shapes:
        y:           (B, T, D)
        memory:      (B, S, D), the encoder output
        tgt_mask:    (B, T) bool, True = real target token (None: no padding)
        memory_mask: (B, S) bool, True = real source token (None: no padding)
        skip_padding: all but attention's core on the real target positions alone
                     (``PaddedRows``), as ``TransformerEncoder.forward``: real positions'
                     outputs unchanged, 0 at padding
        returns:     y (B, T, D); per layer (α_self (B, H, T, T), α_cross (B, H, T, S))
                     when need_weights, else None
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: Activation = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerDecoderLayer(
                d_model, n_heads, d_ff, dropout, activation, norm_first, layer_norm_eps
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None

    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        need_weights: bool = False,
        skip_padding: bool = False,
    ) -> tuple[Tensor, list[LayerWeights] | None]:
        T = y.size(1)
        self_mask = attention_mask(tgt_mask, causal_mask(T, T, y.device))  # (B, 1, T, T)
        cross_mask = attention_mask(memory_mask)  # (B, 1, 1, S) or None
        # skip_padding: the residual stream as the real positions only (CPU; PaddedRows.of)
        rows = PaddedRows.of(tgt_mask) if skip_padding else None
        if rows is not None:
            y = rows.pack(y)  # (N, D)
        weights: list[LayerWeights] = []
        for layer in self.layers:
            y, w = layer(y, memory, self_mask, cross_mask, need_weights, rows)  # (B, T, D)
            if w is not None:
                weights.append(w)
        if self.norm is not None:
            y = self.norm(y)  # (B, T, D) or (N, D)
        if rows is not None:
            y = rows.unpack(y)  # (B, T, D), 0 at padding
        return y, (weights if need_weights else None)

    def init_state(
        self, memory: Tensor, memory_mask: Tensor | None = None, cache: SelfCache = "auto"
    ) -> TransformerDecoderState:
        """Nothing decoded yet; the memory's keys/values projected once per layer.
        ``cache``: the self-attention cache, "auto", "tree" or "concat"
        (``TransformerDecoderLayer.init_state``).

        Shapes: memory (B, S, D), memory_mask (B, S) bool or None.
        """
        layers = [layer.init_state(memory, cache) for layer in self.layers]
        return TransformerDecoderState(layers, memory_mask, cache=cache)

    def step(
        self, y_t: Tensor, state: TransformerDecoderState, need_weights: bool = False
    ) -> tuple[Tensor, TransformerDecoderState]:
        """Decode the next position(s) given everything decoded so far (in ``state``).

        The caller adds the positional encoding of position ``state.length`` to y_t.

        Shapes: y_t (B, 1, D) (or (B, T', D) to feed several known positions at once)
                -> out (B, 1, D) (resp. (B, T', D)) and the state with t grown by 1 (T').
        """
        cross_mask = attention_mask(state.memory_mask)  # (B, 1, 1, S) or None
        layers: list[DecoderLayerState] = []
        weights: list[LayerWeights] = []
        for layer, layer_state in zip(self.layers, state.layers):
            y_t, layer_state, w = layer.step(y_t, layer_state, cross_mask, need_weights)
            layers.append(layer_state)
            if w is not None:
                weights.append(w)
        if self.norm is not None:
            y_t = self.norm(y_t)  # (B, T', D)
        new_state = TransformerDecoderState(
            layers, state.memory_mask, weights if need_weights else None, state.cache
        )
        return y_t, new_state
