"""A self-attention key/value cache that beam search reorders without copying it.

The decoder's self-attention cache (``KVCache`` in ``seqlab.nn.multihead``) holds, for
each batch row, the keys and values of the t positions that row has decoded. Beam search
keeps K hypotheses per input and, after every step, replaces each by one of the K
survivors, so the concatenating cache is copied twice per step and layer: once to append
the new position (``KVCache.cat``) and once to follow the survivors
(``KVCache.reorder``). Both copies grow with t.

The K hypotheses of an input form a prefix tree: the keys of step s were computed once
per slot j ∈ [0, K) and never change. ``TreeKVCache`` stores exactly that, once:

    entry (s, j) of input n = the key/value that slot j computed at step s

in a buffer of capacity C steps that is written in place, and gives each row r (input
n = r // G, G = the group size, K in beam search) a table ``slot[r, s]``: the slot whose
entry holds step s of r's own hypothesis. Reordering the hypotheses within their inputs
reorders the (rows, t) table only. Attention runs the G queries of an input against all
t·G entries of its input at once, with the mask

    keep(r, s, j) = (slot[r, s] == j)  [and the caller's mask over positions s]

so each query sees exactly its own t positions, in the same order: the attention is the
one of ``KVCache`` (masked entries get weight 0; tests/nn/test_tree_kv_cache.py compares
the two). The scores read every entry of an input once for its G queries, the same
number of keys as G separate rows of t.

Writes are in place, so two states must not append to one buffer from the same length:
the buffer records how far it is filled (``filled``), and a state that appends from an
earlier length (a second step from the same state) first copies its t positions into a
buffer of its own. A state is therefore still a value, as ``seqlab.decode.state``
requires; the search's usual chain (step, reorder, step, …) never copies.

Keys and values are stored in float32 on CPU (the decoder step's attention computes
there, ``MultiHeadAttention._single_query``), so the per-step upcast of the whole cache
disappears too; elsewhere in the projections' dtype.

The Transformer decoder uses it from beam search's expansion on (``cache="auto"``,
seqlab/nn/transformer_decoder.py). Measured on a 2-core CPU (docs/perf-notes-measured.md
§24): beam 5 1.07× the concatenating cache at 30 new tokens, 1.25× at 100 (bf16); for
greedy search, whose cache is never reordered, it was 5–9 % slower, so greedy keeps
``KVCache``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.nn.multihead import KVCache, _whole_groups

_MIN_CAPACITY = 16  # steps; the buffer doubles when full (amortised O(1) per step)


class TreeStore:
    """The buffers of a ``TreeKVCache``, shared by the states of one search, written in place.

    Shapes:
        k, v:   (N, H, C·G, Dh), entry s·G + j = step s of slot j, C = capacity in steps
        filled: the number of steps written (entries [0, filled·G) hold data)
    """

    def __init__(self, k: Tensor, v: Tensor, group: int, filled: int) -> None:
        self.k, self.v, self.group, self.filled = k, v, group, filled

    @property
    def capacity(self) -> int:
        """C, the number of steps the buffers hold."""
        return self.k.shape[2] // self.group

    @classmethod
    def empty(cls, like: Tensor, n: int, capacity: int, group: int) -> TreeStore:
        """Zeroed buffers for ``n`` inputs of ``group`` slots, ``capacity`` steps, shaped and
        placed after ``like`` (B, H, ·, Dh); float32 on CPU (module docstring)."""
        H, Dh = like.shape[1], like.shape[3]
        dtype = like.dtype
        if like.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
            dtype = torch.float32
        k = like.new_zeros(n, H, capacity * group, Dh, dtype=dtype)  # (N, H, C·G, Dh)
        return cls(k, torch.zeros_like(k), group, 0)

    def resized(self, steps: int, capacity: int, like: Tensor | None = None) -> TreeStore:
        """A new store with the first ``steps`` steps copied and room for ``capacity``;
        its dtype after ``like`` when given (the first keys, for an empty store)."""
        like = self.k if like is None else like
        new = TreeStore.empty(like, self.k.shape[0], capacity, self.group)
        n = steps * self.group
        new.k[:, :, :n] = self.k[:, :, :n]
        new.v[:, :, :n] = self.v[:, :, :n]
        new.filled = steps
        return new


@dataclass
class TreeKVCache:
    """Self-attention keys/values of the decoded positions, stored once per (step, slot);
    see the module docstring. Row r belongs to input r // G and reads, at step s, entry
    s·G + slot[r, s] of that input.

    Shapes:
        store: TreeStore with k, v (N, H, C·G, Dh), N = B / G
        slot:  (B, t) long, values in [0, G)
    """

    store: TreeStore
    slot: Tensor

    @classmethod
    def empty(cls, like: Tensor) -> TreeKVCache:
        """No position decoded yet, one slot per row (G = 1); ``like`` (B, H, ·, Dh). The
        buffers are allocated by the first ``append``, in the dtype its keys call for."""
        B = like.shape[0]
        store = TreeStore.empty(like, B, 0, 1)
        return cls(store, torch.zeros(B, 0, dtype=torch.long, device=like.device))

    @property
    def group(self) -> int:
        """G, the rows (slots) per input."""
        return self.store.group

    @property
    def length(self) -> int:
        """t, the number of cached positions."""
        return self.slot.shape[1]

    def append(self, new: KVCache) -> TreeKVCache:
        """Add the keys/values of T' new positions of every row after its t cached ones.

        Writes entries (t … t+T'−1, own slot) in place, unless this state is not the last
        one to write its buffer or the buffer is full: then its t positions are copied to a
        new buffer first (module docstring).

        Shapes: new KVCache (B, H, T', Dh), unshared -> TreeKVCache with t + T' positions
        """
        B, H, T_new, Dh = new.k.shape
        G, t = self.group, self.length
        N = B // G
        compiling = torch.compiler.is_compiling()  # then ``ready`` ran before the graph
        store = self.store if compiling else self.ready(T_new, new.k).store
        # entries t·G … (t+T')·G − 1: steps t … t+T'−1 of every slot, in entry order s·G + j
        entries = torch.arange(t * G, (t + T_new) * G, device=self.slot.device)  # (T'·G,)
        for buffer, x in ((store.k, new.k), (store.v, new.v)):
            x = x.view(N, G, H, T_new, Dh).permute(0, 2, 3, 1, 4)  # (N, H, T', G, Dh)
            buffer.index_copy_(2, entries, x.reshape(N, H, T_new * G, Dh).to(buffer.dtype))
        if not compiling:
            store.filled = t + T_new
        own = torch.arange(G, device=self.slot.device).repeat(N)  # (B,) row r is slot r % G
        slot = torch.cat([self.slot, own[:, None].expand(B, T_new)], dim=1)  # (B, t + T')
        return TreeKVCache(store, slot)

    def ready(self, T_new: int = 1, like: Tensor | None = None) -> TreeKVCache:
        """This cache, or a copy of its t positions in a buffer of its own, so that
        appending T' positions may write in place: a copy when another state has already
        written past t (a second step from this state) or the buffer has no room.
        ``like``: the keys about to be appended; an empty cache's first buffer takes their
        dtype (float32 for bf16/fp16 keys on CPU).

        ``append`` calls it, except inside ``torch.compile`` (Python bookkeeping is not
        traced): a compiled step's caller runs it before the graph and ``written`` after
        (``TransformerDecoderState.ready`` / ``written``; seqlab.decode.compiled).
        """
        t, store = self.length, self.store
        if store.filled == t and t + T_new <= store.capacity:
            return self
        capacity = max(2 * store.capacity, t + T_new, _MIN_CAPACITY)
        return TreeKVCache(store.resized(t, capacity, like if t == 0 else None), self.slot)

    def written(self) -> None:
        """Record that this state's positions are the buffer's latest (after a compiled
        step, which cannot record it itself)."""
        self.store.filled = self.length

    def keep_mask(self, mask: Tensor | None, T: int) -> Tensor | None:
        """Which entries each query row sees: its own slot at every step, and only the
        positions ``mask`` keeps.

            keep[n, g·T + p, s·G + j] = (slot[n·G + g, s] == j) ∧ mask[n·G + g, p, s]

        Shapes: mask bool, broadcastable to (B, 1, T, t) (a causal (T, t) band, padding
                (B, 1, 1, t)) or None -> (N, 1, G·T, t·G) bool; with G = 1 ``mask`` itself
        """
        B, t = self.slot.shape
        G = self.group
        if G == 1:  # entry s is position s: the caller's mask as it is
            return mask
        slots = torch.arange(G, device=self.slot.device)  # (G,)
        own = (self.slot[:, :, None] == slots).view(B, 1, t * G)  # (B, 1, t·G)
        if mask is not None:
            if mask.dim() == 4:
                if mask.size(1) != 1:
                    raise ValueError(
                        f"a TreeKVCache takes one mask for all heads, got {mask.shape}"
                    )
                mask = mask[:, 0]  # (B | 1, T | 1, t)
            own = own & mask.repeat_interleave(G, dim=-1)  # (B, T, t·G)
        own = own.expand(B, T, t * G)  # (B, T, t·G)
        return own.reshape(B // G, 1, G * T, t * G)  # (N, 1, G·T, t·G)

    def entries(self) -> KVCache:
        """The t·G written entries of every input as one cache of N rows (a view).

        Shapes: -> KVCache (N, H, t·G, Dh)
        """
        n = self.length * self.group
        return KVCache(self.store.k[:, :, :n], self.store.v[:, :, :n])

    def queries_by_input(self, q: Tensor) -> Tensor:
        """The G rows' queries of each input side by side: (B, H, T, Dh) -> (N, H, G·T, Dh)."""
        B, H, T, Dh = q.shape
        G = self.group
        return q.view(B // G, G, H, T, Dh).transpose(1, 2).reshape(B // G, H, G * T, Dh)

    def rows_from_inputs(self, z: Tensor, T: int) -> Tensor:
        """Inverse of ``queries_by_input``: (N, H, G·T, Dh) -> (B, H, T, Dh)."""
        N, H, _, Dh = z.shape
        G = self.group
        return z.view(N, H, G, T, Dh).transpose(1, 2).reshape(N * G, H, T, Dh)

    def flat(self) -> KVCache:
        """Each row's own t positions, in order, as a plain cache (a gather; for the
        readable attention path, which returns the weights per position).

        Shapes: -> KVCache (B, H, t, Dh)
        """
        B, t = self.slot.shape
        G = self.group
        H, Dh = self.store.k.shape[1], self.store.k.shape[3]
        rows = torch.arange(B, device=self.slot.device) // G  # (B,) input of each row
        entry = torch.arange(t, device=self.slot.device) * G + self.slot  # (B, t)
        index = entry[:, None, :, None].expand(B, H, t, Dh)  # (B, H, t, Dh)
        k = self.store.k.index_select(0, rows).gather(2, index)  # (B, H, t, Dh)
        v = self.store.v.index_select(0, rows).gather(2, index)  # (B, H, t, Dh)
        return KVCache(k, v)

    def reorder(self, index: Tensor, within_inputs: bool = False) -> TreeKVCache:
        """Select batch rows: new row i is old row ``index[i]``.

        ``within_inputs`` (beam search after ``repeat_rows``: rows stay in their block of
        G) reorders the slot table only. Otherwise: whole groups in order (dropping the
        inputs that are done) select buffers; every row repeated G' times in order from
        G = 1 (``repeat_rows``, beam expansion) makes groups of G' that share the buffer's
        history in slot 0; any other index gathers each row's positions into a new cache
        with G = 1.

        Shapes: index (B',) long -> TreeKVCache with B' rows
        """
        G, t = self.group, self.length
        slot = self.slot.index_select(0, index)  # (B', t)
        if within_inputs:
            return TreeKVCache(self.store, slot)
        times = repeat_factor(index, self.slot.shape[0]) if G == 1 else None
        if times is not None and times > 1:
            return self._expanded(times)
        blocks = _whole_groups(index, G)  # with G = 1: any index
        if blocks is not None:
            k, v = self.store.k.index_select(0, blocks), self.store.v.index_select(0, blocks)
            return TreeKVCache(TreeStore(k, v, G, t), slot)
        return TreeKVCache.from_cache(self.flat().reorder(index))

    def _expanded(self, times: int) -> TreeKVCache:
        """Every row repeated ``times`` times as one group: step s of the shared history is
        entry (s, slot 0), the other slots are empty until they write."""
        B, t = self.slot.shape
        store = TreeStore.empty(self.store.k, B, max(self.store.capacity, _MIN_CAPACITY), times)
        C = store.capacity
        for new, old in ((store.k, self.store.k), (store.v, self.store.v)):
            H, Dh = new.shape[1], new.shape[3]
            new.view(B, H, C, times, Dh)[:, :, :t, 0] = old[:, :, :t]
        store.filled = t
        slot = self.slot.new_zeros(B * times, t)  # (B·times, t)
        return TreeKVCache(store, slot)

    @classmethod
    def from_cache(cls, kv: KVCache) -> TreeKVCache:
        """A plain cache's positions as a TreeKVCache with G = 1 (a copy).

        Shapes: kv KVCache (B, H, t, Dh) -> TreeKVCache (B rows, t positions)
        """
        kv = kv.expanded()
        B, t = kv.k.shape[0], kv.k.shape[2]
        store = TreeStore.empty(kv.k, B, max(t, _MIN_CAPACITY), 1)
        store.k[:, :, :t] = kv.k
        store.v[:, :, :t] = kv.v
        store.filled = t
        return cls(store, torch.zeros(B, t, dtype=torch.long, device=kv.k.device))


def repeat_factor(index: Tensor, B: int) -> int | None:
    """``times`` if ``index`` is 0 (×times), 1 (×times), …, B − 1 (×times), else None."""
    if B == 0 or index.numel() % B:
        return None
    times = index.numel() // B
    expected = torch.arange(B, device=index.device).repeat_interleave(times)  # (B·times,)
    return times if torch.equal(index, expected) else None
