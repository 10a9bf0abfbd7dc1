"""Verdict rules of ``seqlab report`` for the cost and identity claims, read from the
records of ``seqlab inspect complexity | positional | attention-speed``: the Transformer's
training/decoding cost against the RNN's, the sinusoidal encoding's linear offsets and
dot-product against additive attention. Each function is ``Records -> Claim``.
"""

from __future__ import annotations

from typing import Any

from seqlab.inspect.claims import (
    NOT_HERE,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    Claim,
    Records,
    Source,
)

IDENTITY = 1e-9  # float64 rounding bound for an exact identity
COMPLEXITY = "OMP_NUM_THREADS=1 python benchmarks/complexity.py"
POSITIONAL = "seqlab inspect positional --out docs/figures"
SPEED = "seqlab inspect attention-speed --out docs/figures"
CLAIMS = "python benchmarks/inspect_claims.py"


def _largest_t(points: list[dict[str, Any]], family: str) -> dict[str, Any] | None:
    along_t = [p for p in points if p["family"] == family and p["axis"] == "t"]
    return max(along_t, key=lambda p: p["t"]) if along_t else None


def transformer_cost(rec: Records) -> Claim:
    key = "transformer-cost"
    statement = (
        "Transformers train faster than RNNs on parallel hardware for longer sequences, "
        "but decode at higher cost"
    )
    rule = (
        "from complexity.json at the largest t swept. Train half: on a record made on a "
        "GPU (points with CUDA peak bytes), the Transformer's training step time < the RNN's "
        "(sutskever); on a CPU-only record this half is not measurable here. Decode half: "
        "Transformer greedy decoding time > the RNN's AND its decoder state grows with t "
        "(fitted exponent ≥ 0.9) while the RNN's does not (≤ 0.1). Reproduced: both halves "
        "hold; partly: one holds (the other failing or not measurable); else not reproduced."
    )
    sources = (
        Source("figure", "docs/figures/complexity.png", COMPLEXITY),
        Source("record", "docs/figures/complexity.json", COMPLEXITY),
        Source("table", "docs/results.md#Complexity", COMPLEXITY),
    )
    data = rec.json("complexity.json")
    points = (data or {}).get("points", [])
    tr, rnn = _largest_t(points, "transformer"), _largest_t(points, "rnn")
    if tr is None or rnn is None:
        return Claim(key, statement, rule, NOT_HERE, f"no record: run `{COMPLEXITY}`.")
    fits = data["fits"]
    state_tr = fits["transformer"]["state_bytes"]["t"]["exponent"]
    state_rnn = fits["rnn"]["state_bytes"]["t"]["exponent"]
    decode = tr["decode_s"] > rnn["decode_s"] and state_tr >= 0.9 and state_rnn <= 0.1
    on_gpu = tr.get("peak_bytes") is not None
    train = tr["train_s"] < rnn["train_s"] if on_gpu else None
    t = tr["t"]
    cpu_only = (
        " on a CPU thread, where nothing runs in parallel: the train half is not measurable "
        "here (run `seqlab inspect complexity` on a CUDA machine)"
    )
    why = [
        f"at t = {t}: training step {1e3 * tr['train_s']:.0f} ms (Transformer) vs "
        f"{1e3 * rnn['train_s']:.0f} ms (RNN)" + ("" if on_gpu else cpu_only),
        f"greedy decoding {1e3 * tr['decode_s']:.0f} ms vs {1e3 * rnn['decode_s']:.0f} ms, "
        f"decoder state ∝ t^{state_tr:.2f} vs t^{state_rnn:.2f} → decode half "
        f"{'holds' if decode else 'fails'}",
        "sequential operations (notes, structural): RNN t, Transformer d",
    ]
    if train is not None and decode:
        verdict = REPRODUCED if train else PARTLY
    elif decode or train:
        verdict = PARTLY
    else:
        verdict = NOT_REPRODUCED
    return Claim(key, statement, rule, verdict, "; ".join(why) + ".", rec.present(*sources))


def sinusoidal_offsets(rec: Records) -> Claim:
    key = "sinusoidal"
    statement = "The sinusoidal encoding makes PE(pos+k) a linear function of PE(pos)"
    rule = (
        "from positional-offset.json: for every offset k, max|PE(pos+k) − M_k PE(pos)| "
        f"(float64) < {IDENTITY:g} and the spread of PE(pos)·PE(pos+k) over pos < "
        f"{IDENTITY:g}. Reproduced: every offset; partly: some; else not reproduced."
    )
    sources = (
        Source("figure", "docs/figures/positional-offset.png", POSITIONAL),
        Source("record", "docs/figures/positional-offset.json", POSITIONAL),
        Source("table", "docs/results.md#Sinusoidal encoding: linear offsets", CLAIMS),
    )
    rows = (rec.json("positional-offset.json") or {}).get("offsets", [])
    if not rows:
        return Claim(key, statement, rule, NOT_HERE, f"no record: run `{POSITIONAL}`.")
    ok = [
        r["k"]
        for r in rows
        if r["max_error_float64"] < IDENTITY and r["dot_spread_over_pos"] < IDENTITY
    ]
    verdict = REPRODUCED if len(ok) == len(rows) else PARTLY if ok else NOT_REPRODUCED
    worst = max(r["max_error_float64"] for r in rows)
    why = (
        f"holds for {len(ok)} of {len(rows)} offsets (k = {', '.join(str(r['k']) for r in rows)}"
        f"); largest error {worst:.1e}."
    )
    return Claim(key, statement, rule, verdict, why, rec.present(*sources))


def dot_vs_additive(rec: Records) -> Claim:
    key = "dot-additive"
    statement = "Dot-product attention is faster than additive attention at equal size"
    rule = (
        "from attention-speed.json (A = D, same batch and lengths): additive / dot time "
        "ratio > 1 for both forward and forward + backward. Reproduced: at every length; "
        "partly: at some; else not reproduced."
    )
    sources = (
        Source("figure", "docs/figures/attention-speed.png", SPEED),
        Source("record", "docs/figures/attention-speed.json", SPEED),
        Source("table", "docs/results.md#Dot-product vs additive attention", CLAIMS),
    )
    data = rec.json("attention-speed.json") or {}
    rows = data.get("rows", [])
    if not rows:
        return Claim(key, statement, rule, NOT_HERE, f"no record: run `{SPEED}`.")
    faster = [r for r in rows if r["ratio_forward"] > 1 and r["ratio_forward_backward"] > 1]
    verdict = REPRODUCED if len(faster) == len(rows) else PARTLY if faster else NOT_REPRODUCED
    lo = min(r["ratio_forward_backward"] for r in rows)
    hi = max(r["ratio_forward_backward"] for r in rows)
    why = (
        f"dot faster at {len(faster)} of {len(rows)} lengths (T = S = "
        f"{', '.join(str(r['S']) for r in rows)}, D = A = {data.get('D')}); additive "
        f"forward + backward {lo:.1f}–{hi:.1f}× slower (wall clock, one CPU thread)."
    )
    return Claim(key, statement, rule, verdict, why, rec.present(*sources))
