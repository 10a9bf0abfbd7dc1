"""Multi-head attention (Vaswani et al. 2017, §3.2.2) and its key/value cache.

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O
    head_i             = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    Attention(Q, K, V) = softmax(QKᵀ / √d_k) V                        (eq. 1)

with d_k = d_v = d_model / h. The h per-head projections W_i^Q ∈ ℝ^{d_model×d_k} are
stored side by side as one ``nn.Linear(d_model, d_model)`` per role (``W_q``, ``W_k``,
``W_v``), whose output is split into heads; ``W_o`` is W^O. In training, self-attention
computes its q, k, v as one product by the stacked [W_q; W_k; W_v] (``project_qkv``),
cross-attention its k, v by [W_k; W_v]: the same linear maps, a third of the launches.

Two paths compute the same function:
  * fast (``need_weights=False``): ``torch.nn.functional.scaled_dot_product_attention``,
    except on CPU for a single query position (a decoder step) and for training (grad
    on), where the readable path's matmuls are faster than SDPA's kernels
    (docs/perf-notes-decoding.md §13, docs/perf-notes-training.md §37);
  * readable (``need_weights=True``): ``scaled_dot`` from ``seqlab.nn.attention``,
    ``masked_softmax``, dropout, weighted sum; also returns the per-head weights.
tests/nn/test_multihead.py proves they agree (values and gradients) and that both equal
``torch.nn.MultiheadAttention`` with copied weights.

Incremental decoding: ``project_kv`` projects keys/values once into a ``KVCache``
(already split into heads); ``KVCache.cat`` appends the new step's keys/values and
``attend`` runs the queries of the new step(s) against the cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.attention import scaled_dot
from seqlab.nn.dropout import dropout
from seqlab.nn.masks import masked_softmax

if TYPE_CHECKING:
    from seqlab.nn.row_packing import PaddedRows
    from seqlab.nn.tree_kv_cache import TreeKVCache

# On CPU a single query row (a decoder step) and a training step's attention go through
# the readable path's matmuls, not SDPA (``MultiHeadAttention._kernel``);
# ``always_sdpa()`` turns both off, for benchmarks and tests.
_CPU_MATMUL = True

# With grad on and no dropout, SDPA's CPU kernel (flash) keeps no (T, S) matrix: past this
# many keys it stays, for its memory; below, its backward is the slower one (§37).
MATMUL_MAX_KEYS = 128


@contextlib.contextmanager
def always_sdpa() -> Iterator[None]:
    """Inside: every fast-path call uses SDPA, on CPU too (decoder steps, training)."""
    global _CPU_MATMUL
    saved, _CPU_MATMUL = _CPU_MATMUL, False
    try:
        yield
    finally:
        _CPU_MATMUL = saved


# When training, self-attention projects q, k, v with one product by the stacked
# [W_q; W_k; W_v] (and cross-attention k, v by [W_k; W_v]) — ``MultiHeadAttention.
# project_qkv``; ``separate_projections()`` turns that off, to measure it. Without grad
# (decoding, evaluation) the three products stay in eager mode: a decoder step would
# rebuild and recast the stacked matrix every step, where autocast casts each parameter
# once per region (measured 0.92–0.99× there; docs/perf-notes-gpu.md §31). Inside a
# compiled graph they are stacked again: with frozen weights (seqlab.decode.compiled) the
# concatenation is a constant, folded once when the graph is built (unless traced inside
# ``separate_projections()``, as seqlab.decode.compiled does where inductor's SDPA rewrite
# is on; docs/perf-notes-compiled-beam.md §53).
_STACKED_PROJECTIONS = True


def _stack_projections() -> bool:
    return _STACKED_PROJECTIONS and (torch.is_grad_enabled() or torch.compiler.is_compiling())


@contextlib.contextmanager
def separate_projections() -> Iterator[None]:
    """Inside: q, k and v are three products (``W_q(x)``, ``W_k(x)``, ``W_v(x)``)."""
    global _STACKED_PROJECTIONS
    saved, _STACKED_PROJECTIONS = _STACKED_PROJECTIONS, False
    try:
        yield
    finally:
        _STACKED_PROJECTIONS = saved


@dataclass
class KVCache:
    """Projected keys and values, split into heads: k = K W^K, v = V W^V per head.

    ``group`` = G > 1 means the cache is shared: query row r reads key/value row r // G,
    so k and v hold B / G rows for B query rows. Beam search's ``repeat_rows`` builds it
    (``grouped``) for the cross-attention keys of an input's K hypotheses, which are the
    same (``seqlab.decode.state``, "Shared static fields"), instead of copying them K
    times. ``expanded()`` gives the unshared form.

    Shapes:
        k: (B / G, H, S, Dh)
        v: (B / G, H, S, Dh)
    """

    k: Tensor
    v: Tensor
    group: int = 1

    def cat(self, other: KVCache) -> KVCache:
        """Append ``other`` after ``self`` along the key axis S (incremental self-attention)."""
        mine, theirs = self.expanded(), other.expanded()
        k = torch.cat([mine.k, theirs.k], dim=2)  # (B, H, S + S', Dh)
        v = torch.cat([mine.v, theirs.v], dim=2)  # (B, H, S + S', Dh)
        return KVCache(k, v)

    def reorder(self, index: Tensor) -> KVCache:
        """Select batch rows (beam search: keep the cache of each surviving hypothesis).

        Query row i of the result reads what row ``index[i]`` read (row index[i] // G of
        a shared cache). The result is unshared, unless ``index`` takes whole groups
        (g·G, g·G + 1, … g·G + G − 1 for each chosen g), as beam search does when it drops
        the inputs that are done: then the chosen rows stay shared.

        Shapes: index (B',) long -> KVCache with batch B'.
        """
        if self.group > 1:
            blocks = _whole_groups(index, self.group)  # (B'/G,) or None
            if blocks is not None:  # whole groups in order: still shared (beam compaction)
                return KVCache(
                    self.k.index_select(0, blocks), self.v.index_select(0, blocks), self.group
                )
            index = torch.div(index, self.group, rounding_mode="floor")  # (B',) own rows
        k = self.k.index_select(0, index)  # (B', H, S, Dh)
        v = self.v.index_select(0, index)  # (B', H, S, Dh)
        return KVCache(k, v)

    def grouped(self, times: int) -> KVCache:
        """The cache of every row repeated ``times`` times in order (rows b·times …
        b·times + times − 1 = row b), without copying: the group grows by ``times``."""
        return KVCache(self.k, self.v, self.group * times)

    def expanded(self) -> KVCache:
        """The unshared form: each key/value row repeated ``group`` times (a copy)."""
        if self.group == 1:
            return self
        k = self.k.repeat_interleave(self.group, dim=0)  # (B, H, S, Dh)
        v = self.v.repeat_interleave(self.group, dim=0)  # (B, H, S, Dh)
        return KVCache(k, v)

    @property
    def length(self) -> int:
        """S, the number of cached key positions."""
        return self.k.shape[2]


def _whole_groups(index: Tensor, G: int) -> Tensor | None:
    """The groups g if ``index`` is g_1·G … g_1·G + G − 1, g_2·G …, else None.

    Shapes: index (B',) long -> (B' / G,) long or None
    """
    if index.numel() % G:
        return None
    blocks = index.view(-1, G)  # (B'/G, G)
    first = blocks[:, :1]  # (B'/G, 1)
    offsets = torch.arange(G, device=index.device)  # (G,)
    if bool((first % G == 0).all()) and torch.equal(blocks - first, offsets.expand_as(blocks)):
        return torch.div(first[:, 0], G, rounding_mode="floor")
    return None


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, Vaswani 2017 §3.2.2 and eq. 1.

        q = Q W_q, k = K W_k, v = V W_v       split into H heads of width d_k = d_model / H
        z_h = softmax(q_h k_hᵀ / √d_k) v_h     one per head (masked, dropout on the weights)
        out = Concat(z_1 … z_H) W_o

    Deviations: the projections have biases when ``bias=True`` (the paper's are linear;
    ``torch.nn.MultiheadAttention`` has them too); dropout on the attention weights is
    from the reference implementation (tensor2tensor), not in the paper's equations.
    A query row whose mask keeps no key gets z = 0 (not NaN) on both paths. The returned
    weights are α before dropout (the attention distribution), whereas
    ``torch.nn.MultiheadAttention`` returns them after dropout; in eval mode they agree.

    Shapes:
        query:   (B, T, d_model)
        key:     (B, S, d_model)
        value:   (B, S, d_model)
        mask:    bool, True = keep, broadcastable to (B, H, T, S): (B, 1, T, S),
                 (B, 1, 1, S) or (T, S) (see ``seqlab.nn.masks.attention_mask``)
        returns: out (B, T, d_model); weights (B, H, T, S) when need_weights, else None

    Padding-free (``rows``, a ``seqlab.nn.row_packing.PaddedRows`` of the query side): the
    query (and, in self-attention, key and value) are the N real positions, (N, d_model);
    the projections run on them, the heads are put back into (B, T) for the attention
    itself, and out is (N, d_model) (docs/perf-notes-training.md §36).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be a positive multiple of n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.dropout = dropout
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The reference initialisation (tensor2tensor; ``torch.nn.MultiheadAttention``).

        W_q, W_k, W_v are one stacked matrix [W_q; W_k; W_v] ∈ ℝ^{3d×d} in the reference,
        drawn from one Xavier-uniform U(−a, a) with a = √(6 / (d + 3d)) — a √2 narrower
        bound than three separate (d × d) draws; W_o is Xavier-uniform over (d × d); every
        bias is zero. The separate draw trained 0.4 nats worse after 1,000 Multi30k steps
        (docs/perf-notes-measured.md §20), which is why the fan of the stacked matrix is used here.
        """
        d = self.d_model
        a_qkv = (6.0 / (d + 3 * d)) ** 0.5
        for W in (self.W_q, self.W_k, self.W_v):
            nn.init.uniform_(W.weight, -a_qkv, a_qkv)
        nn.init.xavier_uniform_(self.W_o.weight)
        for W in (self.W_q, self.W_k, self.W_v, self.W_o):
            if W.bias is not None:
                nn.init.zeros_(W.bias)

    @staticmethod
    def reset_all(module: nn.Module) -> None:
        """``reset_parameters`` of every MultiHeadAttention inside ``module``: for models
        whose own Xavier pass over all matrices has overwritten the reference init."""
        for m in module.modules():
            if isinstance(m, MultiHeadAttention):
                m.reset_parameters()

    def _split_heads(self, x: Tensor, rows: PaddedRows | None = None) -> Tensor:
        """(B, L, d_model) -> (B, H, L, Dh); packed rows (N, d_model) are put back first."""
        if rows is not None:
            x = rows.unpack(x)  # (B, L, d_model), 0 at padding
        B, L, _ = x.shape
        x = x.view(B, L, self.n_heads, self.d_k)  # (B, L, H, Dh)
        return x.transpose(1, 2)  # (B, H, L, Dh)

    def project_kv(self, key: Tensor, value: Tensor) -> KVCache:
        """k = K W_k and v = V W_v, split into heads; one product by [W_k; W_v] (2d × d)
        when ``key is value`` (cross-attention over the memory) and grad is on.

        Shapes: key (B, S, d_model), value (B, S, d_model) -> KVCache (B, H, S, Dh).
        """
        if key is value and _stack_projections():
            k, v = self._stacked(key, (self.W_k, self.W_v)).chunk(2, dim=-1)  # (B, S, d) each
            return KVCache(self._split_heads(k), self._split_heads(v))  # (B, H, S, Dh)
        k = self._split_heads(self.W_k(key))  # (B, H, S, Dh)
        v = self._split_heads(self.W_v(value))  # (B, H, S, Dh)
        return KVCache(k, v)

    def project_qkv(self, x: Tensor, rows: PaddedRows | None = None) -> tuple[Tensor, KVCache]:
        """Self-attention's q = x W_q, k = x W_k, v = x W_v, split into heads: with grad on,
        one product by the stacked [W_q; W_k; W_v] (3d × d), the same three linear maps in
        one GEMM (a third of the launches; ``nn.MultiheadAttention`` stores its ``in_proj``
        so); without grad the three products, unless compiling (``_STACKED_PROJECTIONS``).

        Shapes: x (B, T, d_model), or (N, d_model) with ``rows`` -> q (B, H, T, Dh),
                KVCache (B, H, T, Dh).
        """
        if not _stack_projections():  # no grad, or measuring: the three products
            q, k, v = (self._split_heads(W(x), rows) for W in (self.W_q, self.W_k, self.W_v))
            return q, KVCache(k, v)  # (B, H, T, Dh) each
        qkv = self._stacked(x, (self.W_q, self.W_k, self.W_v))  # (B, T, 3·d_model) or (N, ·)
        if rows is not None:
            qkv = rows.unpack(qkv)  # (B, T, 3·d_model): one put-back for the three
        q, k, v = (self._split_heads(t) for t in qkv.chunk(3, dim=-1))  # (B, H, T, Dh) each
        return q, KVCache(k, v)

    @staticmethod
    def _stacked(x: Tensor, linears: tuple[nn.Linear, ...]) -> Tensor:
        """[x W_1ᵀ + b_1, …, x W_nᵀ + b_n] as one product by the stacked weights.
        (..., d) -> (..., n·d)."""
        W = torch.cat([lin.weight for lin in linears])  # (n·d, d)
        b = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
        return F.linear(x, W, b)  # (..., n·d)

    def attend(
        self,
        query: Tensor,
        kv: KVCache | TreeKVCache,
        mask: Tensor | None = None,
        need_weights: bool = False,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of ``query`` over already projected keys/values.

        Shapes:
            query:   (B, T, d_model), or (N, d_model) with ``rows``
            kv:      KVCache (B, H, S, Dh)
            mask:    bool, True = keep, broadcastable to (B, H, T, S)
            returns: out (B, T, d_model) (with rows: (N, d_model)); α (B, H, T, S) or None
        """
        q = self._split_heads(self.W_q(query), rows)  # (B, H, T, Dh)
        return self.attend_heads(q, kv, mask, need_weights, rows)

    def attend_heads(
        self,
        q: Tensor,
        kv: KVCache | TreeKVCache,
        mask: Tensor | None = None,
        need_weights: bool = False,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``attend`` for queries already projected and split into heads (``project_qkv``).

        Shapes: q (B, H, T, Dh), kv, mask as ``attend`` -> out (B, T, d_model), or
                (N, d_model) with ``rows``: W_o on the real positions alone; α or None
        """
        B, _, T, _ = q.shape
        self._check_mask(mask, (B, self.n_heads, T, kv.length))
        p = self.dropout if self.training else 0.0
        if not isinstance(kv, KVCache):  # a TreeKVCache (seqlab.nn.tree_kv_cache)
            if rows is not None:
                raise ValueError("a TreeKVCache decodes step by step: no packed rows")
            if not need_weights:
                return self.W_o(self._tree(q, kv, mask, p)), None  # (B, T, d_model)
            kv = kv.flat()  # (B, H, S, Dh) each row's own positions, for the weights
        if kv.group > 1 and (need_weights or T != 1):
            kv = kv.expanded()  # a decoder step's fast path reads a shared cache as it is
        if need_weights:
            z, alpha = self._matmul(q, kv, mask, p)  # (B, H, T, Dh), (B, H, T, S)
        else:
            alpha = None
            z = self._fused(q, kv, mask, p)  # (B, H, T, Dh)
        z = z.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d_model)  Concat(heads)
        if rows is not None:
            z = rows.pack(z)  # (N, d_model): W_o on the real positions alone
        return self.W_o(z), alpha  # (B, T, d_model) or (N, d_model)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = False,
        rows: PaddedRows | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """MultiHead(Q, K, V) = Concat(head_1 … head_H) W_o; see the class docstring.
        ``rows`` (packed self-attention only): query is key is value, (N, d_model)."""
        if query is key and key is value:  # self-attention: one stacked projection
            q, kv = self.project_qkv(query, rows)  # (B, H, T, Dh), KVCache (B, H, T, Dh)
            return self.attend_heads(q, kv, mask, need_weights, rows)
        if rows is not None:
            raise ValueError("packed rows are for self-attention (query is key is value)")
        return self.attend(query, self.project_kv(key, value), mask, need_weights)

    @staticmethod
    def _readable(q: Tensor, kv: KVCache, mask: Tensor | None) -> Tensor:
        """α = softmax(q kᵀ / √d_k) restricted to the mask (zeros for fully masked rows)."""
        e = scaled_dot(q, kv.k)  # (B, H, T, S)
        return masked_softmax(e, mask)  # (B, H, T, S)

    @staticmethod
    def _fused(q: Tensor, kv: KVCache, mask: Tensor | None, p: float) -> Tensor:
        """softmax(q kᵀ / √d_k) v with PyTorch's fused kernel (same scale 1/√d_k), or, for
        a decoder step on CPU, the readable path's matmuls (``_single_query``).

        A shared cache (``kv.group`` = G > 1, beam search's cross-attention; one query row
        each, T = 1) is read as it is: the G query rows of a group become G query positions
        against their one key/value row, q (B/G, H, G, Dh), so each input's keys are read
        once for its G hypotheses, by either kernel (docs/perf-notes-decoding.md §15). The mask must
        then be the same for the G rows of a group (the keys' padding, as a static source
        mask is); row g·G is used.

        Shapes: q (B, H, T, Dh), kv (B / G, H, S, Dh), mask broadcastable to (B, H, T, S)
                -> (B, H, T, Dh)
        """
        G = kv.group
        if G == 1:
            return MultiHeadAttention._kernel(q, kv, mask, p, step=q.shape[-2] == 1)
        B, H, _, Dh = q.shape
        q = q.reshape(B // G, G, H, Dh).transpose(1, 2)  # (B/G, H, G, Dh)
        if mask is not None and mask.dim() == 4 and mask.size(0) == B:
            mask = mask[::G]  # (B/G, ·, 1, S) one row per group
        z = MultiHeadAttention._kernel(q, KVCache(kv.k, kv.v), mask, p, step=True)
        return z.transpose(1, 2).reshape(B, H, 1, Dh)  # (B, H, 1, Dh) row g·G + j

    def _tree(self, q: Tensor, tree: TreeKVCache, mask: Tensor | None, p: float) -> Tensor:
        """The fast path on a ``TreeKVCache``: the G rows of an input query all t·G entries
        of their input at once, each masked to its own slot per step (``keep_mask``), so
        z is what each row's own t positions give; see seqlab/nn/tree_kv_cache.py.

        Shapes: q (B, H, T, Dh), mask broadcastable to (B, 1, T, S) -> (B, T, d_model)
        """
        B, _, T, _ = q.shape
        z = self._kernel(
            tree.queries_by_input(q), tree.entries(), tree.keep_mask(mask, T), p, step=True
        )  # (N, H, G·T, Dh)
        z = tree.rows_from_inputs(z, T)  # (B, H, T, Dh)
        return z.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d_model)

    @staticmethod
    def _kernel(q: Tensor, kv: KVCache, mask: Tensor | None, p: float, step: bool) -> Tensor:
        """The attention of ``_fused`` on an unshared cache. On CPU a decoder step
        (``step``) without dropout takes ``_single_query``'s matmuls, and a training step
        (grad on) ``_matmul``'s, with dropout, or without it up to ``MATMUL_MAX_KEYS``
        keys; everything else SDPA.

        SDPA's bool mask uses the same convention (True = take part). A query row that
        keeps no key is NaN on some SDPA backends, so such rows are un-masked for the
        kernel and their output set to zero afterwards: z = 0 and no gradient flows
        through them, exactly as with ``masked_softmax`` on the readable path.

        Shapes: q (B, H, T, Dh), kv (B, H, S, Dh), mask broadcastable to (B, H, T, S)
                -> (B, H, T, Dh)
        """
        if q.device.type == "cpu" and _CPU_MATMUL:
            if step and p == 0.0:
                return MultiHeadAttention._single_query(q, kv, mask)  # (B, H, T, Dh)
            if torch.is_grad_enabled() and (p > 0.0 or kv.length <= MATMUL_MAX_KEYS):
                return MultiHeadAttention._matmul(q, kv, mask, p)[0]  # (B, H, T, Dh)
        if mask is None:
            return F.scaled_dot_product_attention(q, kv.k, kv.v, dropout_p=p)  # (B, H, T, Dh)
        row_keep = mask.any(dim=-1, keepdim=True)  # (..., T, 1)  rows that see some key
        attn_mask = mask | ~row_keep  # (..., T, S)
        z = F.scaled_dot_product_attention(q, kv.k, kv.v, attn_mask=attn_mask, dropout_p=p)
        return z * row_keep  # (B, H, T, Dh)

    @staticmethod
    def _matmul(q: Tensor, kv: KVCache, mask: Tensor | None, p: float) -> tuple[Tensor, Tensor]:
        """z = dropout(α) v and α = ``_readable``'s softmax(q kᵀ / √d_k) (before dropout,
        ``seqlab.nn.dropout``'s mask): the readable path (``need_weights``), and the fast
        path for training on CPU.

        As the readable path runs them, under bf16 autocast the two matmuls are bf16 and
        the softmax float32 (``masked_softmax``). SDPA's CPU kernels are slower here
        (docs/perf-notes-training.md §37): with dropout it falls back to its math path,
        which upcasts q, k, v to float32 and draws one float per weight for the mask;
        without dropout its flash kernel took 2–5x the matmuls' time in bf16 at T ≤ 128
        (forward + backward; about even in float32).

        Shapes: q (B, H, T, Dh), kv (B, H, S, Dh), mask broadcastable to (B, H, T, S)
                -> z (B, H, T, Dh), α (B, H, T, S)
        """
        alpha = MultiHeadAttention._readable(q, kv, mask)  # (B, H, T, S)
        return dropout(alpha, p) @ kv.v, alpha  # (B, H, T, Dh), (B, H, T, S)

    @staticmethod
    def _single_query(q: Tensor, kv: KVCache, mask: Tensor | None) -> Tensor:
        """softmax(q kᵀ / √d_k) v for a decoder step, as the readable path, in float32 at
        least.

        For a decoder step two small matmuls and a softmax beat SDPA's CPU kernel 4-5x in
        bf16 and ~1.3x in fp32 (docs/perf-notes-decoding.md §13). Scores, softmax and the weighted
        sum run in float32 (outside autocast), as SDPA accumulates, then z is cast back to
        q's dtype: bf16 scores were up to ~8x less accurate (same section). One query row
        per batch row, or the G rows of a shared cache's group as G positions (``_fused``).

        Shapes: q (B, H, T, Dh), kv (B, H, S, Dh), mask broadcastable to (B, H, T, S)
                -> (B, H, T, Dh) in q's dtype
        """
        dtype = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(q.device.type, enabled=False):
            k, v = kv.k.to(dtype), kv.v.to(dtype)
            alpha = MultiHeadAttention._readable(q.to(dtype), KVCache(k, v), mask)  # (B, H, T, S)
            return (alpha @ v).to(q.dtype)  # (B, H, T, Dh)

    @staticmethod
    def _check_mask(mask: Tensor | None, scores_shape: tuple[int, int, int, int]) -> None:
        if mask is None:
            return
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be torch.bool (True = keep), got {mask.dtype}")
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                f"(B, H, T, S) = {scores_shape}; pass (B, 1, T, S), (B, 1, 1, S) or (T, S)"
            )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, dropout={self.dropout}"
