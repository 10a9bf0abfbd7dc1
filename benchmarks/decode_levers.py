"""The decoding levers of issue 11 measured one at a time, at the shapes of a beam-5 step.

    python benchmarks/decode_levers.py [--threads 1] [--reps 9] [--out FILE]

The workload of ``benchmarks/peers.py``'s decoding section: the small Transformer (d 256,
4 heads of 64, 3 + 3 layers, vocabulary 8,000), batches of 32 sentences, beam 5, so a
decoder step has B·K = 160 rows, sources of ~20 tokens, 30 new tokens. Each lever is
timed as the operation it changes, old and new back to back in this one process, median
over ``--reps`` of the paired new/old ratio (each rep averages a fixed number of calls;
the ms columns are each form's fastest rep):

- **shared cross-attention K/V** (``KVCache.group``, docs/perf-notes-decoding.md §15): the
  single-query attention of one layer over the memory, K/V once per input (32 rows,
  group 5) vs copied per hypothesis (160 rows);
- **preallocated self-attention cache**: one layer's K/V cache over 30 steps, the
  library's ``cat`` + reorder (two copies a step) vs a buffer grown in chunks of 8
  positions, written in place and reordered whole (one copy of the capacity a step);
- **fused candidate selection**: beam search's log_softmax over (160, 8,000), EOS ban,
  + live log P, top-2K of 5 × 8,000 per input, vs logsumexp + a per-row top-(2K+1) on
  the logits and a top-2K of 5 × 11 (the same candidates: a row's best 2K non-EOS are
  in its top 2K + 1);
- **first step on the B inputs** (docs/perf-notes-decoding.md §16): beam search's first decoder
  call, where only slot 0 of each input is live, on the B·K expanded rows (before) vs the
  B inputs (the library now), the preset Transformer with random weights;
- **fused QKV projection**: the three (d × d) projections of a self-attention as three
  GEMMs vs one (d × 3d) GEMM, for a decoder step (160 rows, no grad) and for training
  batches (1,200 and 4,000 rows, forward + backward).

Prints a markdown table (old ms, new ms, new/old) and writes it to ``--out`` if given.
The levers are kept in the library only where the new form wins on the machine that
runs the peers' benchmark; docs/perf-notes-decoding.md §15 says which.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seqlab.nn.multihead import KVCache, MultiHeadAttention  # noqa: E402
from seqlab.train.allocator import keep_freed_memory  # noqa: E402

BK, K, H, DH, S, V, T_NEW = 160, 5, 4, 64, 21, 8000, 30
D = H * DH
Pair = tuple[Callable[[], object], Callable[[], object]]


def shared_cross_kv() -> Pair:
    """One layer's single-query cross-attention, K/V per input vs per hypothesis."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(BK, H, 1, DH, generator=g)
    k, v = torch.randn(BK // K, H, S, DH, generator=g), torch.randn(BK // K, H, S, DH, generator=g)
    mask = torch.ones(BK, 1, 1, S, dtype=torch.bool)
    mask[BK // 2 :, :, :, 17:] = False  # half the inputs padded
    shared = KVCache(k, v).grouped(K)
    copied = shared.expanded()
    return (
        lambda: MultiHeadAttention._fused(q, copied, mask, 0.0),
        lambda: MultiHeadAttention._fused(q, shared, mask, 0.0),
    )


def preallocated_cache(chunk: int = 8) -> Pair:
    """One layer's self-attention K/V cache over T_NEW beam steps (append + reorder)."""
    index = torch.randint(0, K, (BK,)) + torch.arange(BK) // K * K  # within each input
    new = torch.randn(BK, H, 1, DH)

    def cat_and_reorder() -> None:
        cache = KVCache(torch.empty(BK, H, 0, DH), torch.empty(BK, H, 0, DH))
        for _ in range(T_NEW):
            cache = cache.cat(KVCache(new, new)).reorder(index)

    def buffer() -> None:
        cap = chunk
        kb, vb = torch.empty(BK, H, cap, DH), torch.empty(BK, H, cap, DH)
        for t in range(T_NEW):
            if t == cap:  # grow: copy the filled part into a larger buffer
                cap += chunk
                k2, v2 = torch.empty(BK, H, cap, DH), torch.empty(BK, H, cap, DH)
                k2[:, :, :t], v2[:, :, :t] = kb[:, :, :t], vb[:, :, :t]
                kb, vb = k2, v2
            kb[:, :, t : t + 1], vb[:, :, t : t + 1] = new, new
            kb, vb = kb.index_select(0, index), vb.index_select(0, index)

    return cat_and_reorder, buffer


def fused_selection(eos: int = 2) -> Pair:
    """Beam search's candidate selection of one step."""
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(BK, V, generator=g)
    live = torch.randn(BK // K, K, generator=g)
    B = BK // K

    def library() -> tuple[torch.Tensor, torch.Tensor]:
        log_p = F.log_softmax(logits, dim=-1)  # (BK, V)
        log_p[:, eos] = float("-inf")
        total = live[:, :, None] + log_p.view(B, K, V)  # (B, K, V)
        return total.view(B, K * V).topk(2 * K, dim=1)

    def fused() -> tuple[torch.Tensor, torch.Tensor]:
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # (BK, 1)
        row_top, row_tok = logits.topk(2 * K + 1, dim=-1)  # (BK, 2K+1)
        row_top = row_top.masked_fill(row_tok == eos, float("-inf"))
        total = live.view(BK, 1) + (row_top - lse)  # (BK, 2K+1)
        top, j = total.view(B, -1).topk(2 * K, dim=1)  # (B, 2K)
        return top, row_tok.view(B, -1).gather(1, j)

    a, b = library()[0], fused()[0]
    assert torch.allclose(a, b, atol=1e-4), "the two selections disagree"
    return library, fused


def first_step() -> Pair:
    """Beam search's first decoder call: B·K identical rows vs the B inputs."""
    from benchmarks import peers_decode as pdec
    from benchmarks import peers_models as pm
    from benchmarks.decode_static_state import build
    from seqlab.data.vocab import BOS_ID
    from seqlab.decode.state import repeat_rows

    model = build("transformer")
    sources = [s for s, _ in pm.make_pairs(BK // K, pm.SMALL, seed=1)]
    ((src, src_mask),) = pdec.source_batches(sources, BK // K)
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
    expanded = repeat_rows(state, BK // K, K)
    bos_b = torch.full((BK // K,), BOS_ID, dtype=torch.long)
    bos_bk = torch.full((BK,), BOS_ID, dtype=torch.long)

    def run(y: torch.Tensor, st: object) -> None:
        with torch.no_grad():
            model.step(y, st)

    return (lambda: run(bos_bk, expanded)), (lambda: run(bos_b, state))


def fused_qkv(rows: int, grad: bool) -> Pair:
    """Q, K, V projections: three (d × d) GEMMs vs one (d × 3d) GEMM."""
    g = torch.Generator().manual_seed(0)
    Ws = [torch.randn(D, D, generator=g).requires_grad_(grad) for _ in range(3)]
    bs = [torch.randn(D, generator=g).requires_grad_(grad) for _ in range(3)]
    W_qkv = torch.cat([w.detach() for w in Ws]).requires_grad_(grad)
    b_qkv = torch.cat([b.detach() for b in bs]).requires_grad_(grad)
    x = torch.randn(rows, D, generator=g)
    dy = torch.randn(rows, D, generator=g)

    def three() -> None:
        with torch.set_grad_enabled(grad):
            ys = [F.linear(x, w, b) for w, b in zip(Ws, bs, strict=True)]
            if grad:
                torch.autograd.backward(ys, [dy, dy, dy])

    def one() -> None:
        with torch.set_grad_enabled(grad):
            y = F.linear(x, W_qkv, b_qkv)  # (rows, 3d)
            if grad:
                y.backward(torch.cat([dy, dy, dy], dim=-1))

    return three, one


def timed(fn: Callable[[], object], calls: int) -> float:
    """Mean ms per call over ``calls`` calls."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - t0) / calls


def measure(pair: Pair, reps: int, calls: int) -> tuple[float, float, float]:
    """(old ms, new ms, median of the paired new/old ratios); the ms are the fastest rep
    of each (on a shared machine noise only adds time)."""
    old_fn, new_fn = pair
    old_fn(), new_fn()  # warm-up
    olds, news = [], []
    for r in range(reps):
        order = (old_fn, new_fn) if r % 2 == 0 else (new_fn, old_fn)
        times = {fn: timed(fn, calls) for fn in order}
        olds.append(times[old_fn])
        news.append(times[new_fn])
    ratio = statistics.median(n / o for n, o in zip(news, olds, strict=True))
    return min(olds), min(news), ratio


LEVERS: list[tuple[str, str, str, Callable[[], Pair], int]] = [
    ("shared cross-attention K/V (one layer)", "per hypothesis", "per input", shared_cross_kv, 200),
    (
        "self-attention cache, 30 steps (one layer)",
        "cat + reorder",
        "buffer",
        preallocated_cache,
        5,
    ),
    (
        "candidate selection (one step)",
        "log_softmax + top-k",
        "lse + row top-k",
        fused_selection,
        50,
    ),
    ("first beam step (whole decoder)", "B·K rows", "B rows", first_step, 20),
    (
        "QKV, decoder step (160 rows, no grad)",
        "3 GEMMs",
        "1 GEMM",
        lambda: fused_qkv(160, False),
        200,
    ),
    (
        "QKV, training (1,200 rows, fwd + bwd)",
        "3 GEMMs",
        "1 GEMM",
        lambda: fused_qkv(1200, True),
        20,
    ),
    (
        "QKV, training (4,000 rows, fwd + bwd)",
        "3 GEMMs",
        "1 GEMM",
        lambda: fused_qkv(4000, True),
        10,
    ),
]


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--scale", type=float, default=1.0, help="multiply the calls per rep")
    p.add_argument("--out", help="markdown file to write the table to")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as benchmarks/peers.py and seqlab.api.load run
    rows = [
        f"{args.threads} thread(s), fp32, {args.reps} paired reps (ms: the fastest; ratio: "
        "the median of the paired ratios), "
        f"torch {torch.__version__}",
        "",
        "| lever | old | new | old ms | new ms | new / old |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name, old, new, build, calls in LEVERS:
        o, n, ratio = measure(build(), args.reps, max(1, round(calls * args.scale)))
        rows.append(f"| {name} | {old} | {new} | {o:.3f} | {n:.3f} | {ratio:.2f} |")
        print(rows[-1], flush=True)
    text = "\n".join(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
