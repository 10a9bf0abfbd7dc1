"""The verdict rules of ``seqlab report``: one function per claim of the notes, each
``Records -> Claim``. The rule text in each Claim says exactly what is computed; the
thresholds are module constants so that the rule text and the code cannot drift apart.
"""

from __future__ import annotations

from seqlab.inspect.claims import (
    NOT_HERE,
    NOT_REPRODUCED,
    PARTLY,
    REPRODUCED,
    Claim,
    Records,
    Source,
)
from seqlab.inspect.results_md import column, find_section, number, tables

VANISHED = 1e-3  # ‖∂L/∂a⟨1⟩‖ / ‖∂L/∂a⟨T⟩‖ below this at init: the gradient vanished
KEEPS = 100.0  # a gated cell keeps ≥ this many times the plain RNN's ratio
LEARNED, CHANCE = 0.9, 0.75  # trained accuracy: learned the agreement / not above chance
COVERAGE_CUT = 0.9  # coverage's repeated-trigram rate ≤ 0.9 × the plain one: "reduces"

GRADFLOW = "seqlab inspect gradflow --out docs/figures"
TRANSLATION = "python benchmarks/translation.py"
BY_LENGTH = "python benchmarks/bleu_by_length.py"
VISION = "python benchmarks/vision.py --parts depth"
CLASSIFY = "python benchmarks/classify.py"
POINTER_GEN = "python benchmarks/pointer_generator.py"
POINTERS = "python benchmarks/pointers.py"
BEAM_TEST = "tests/decode/test_beam.py"
BEAM_TEST_NAME = "test_beam_one_equals_greedy"


def _claim(
    key: str, statement: str, rule: str, verdict: str, why: str, rec: Records, *sources: Source
) -> Claim:
    return Claim(key, statement, rule, verdict, why, rec.present(*sources))


def _cmd(rec: dict, default: str) -> str:
    return str(rec.get("command") or default)


def vanishing_gradients(rec: Records) -> Claim:
    key, statement = (
        "vanishing",
        "Plain RNNs' gradients vanish over long distances; LSTM/GRU fix it",
    )
    rule = (
        f"from gradflow.json (agreement task): plain RNN ratio ‖∂L/∂a⟨1⟩‖/‖∂L/∂a⟨T⟩‖ at init "
        f"< {VANISHED:g} (vanished); a gated cell is a remedy when its ratio ≥ {KEEPS:g}× the "
        f"RNN's AND it learns the task (trained accuracy ≥ {LEARNED}) while the RNN does not "
        f"(< {CHANCE}). Reproduced: vanished and both LSTM and GRU are remedies; partly: "
        "vanished and at least one gated cell keeps ≥ 100× the gradient; else not reproduced."
    )
    sources = (
        Source("figure", "docs/figures/gradflow-time.png", GRADFLOW),
        Source("record", "docs/figures/gradflow.json", GRADFLOW),
        Source("table", "docs/results.md#Gradient flow", "python benchmarks/inspect_claims.py"),
    )
    data = rec.json("gradflow.json")
    variants = (data or {}).get("time", {}).get("variants", {})
    if not all(v in variants for v in ("rnn", "gru", "lstm")):
        return _claim(key, statement, rule, NOT_HERE, f"no record: run `{GRADFLOW}`.", rec)
    T = data["time"]["distance"] + 1

    def ratio(v: str) -> float:
        h = variants[v]["init"]["h"]
        return h[T] / h[0] if h[0] else float("nan")

    rnn = ratio("rnn")
    vanished = rnn < VANISHED
    keeps = {g: ratio(g) >= KEEPS * rnn for g in ("lstm", "gru")}
    rnn_chance = variants["rnn"]["accuracy_trained"] < CHANCE
    learns = {g: variants[g]["accuracy_trained"] >= LEARNED and rnn_chance for g in keeps}
    remedy = {g: keeps[g] and learns[g] for g in keeps}
    if vanished and all(remedy.values()):
        verdict = REPRODUCED
    elif vanished and any(keeps.values()):
        verdict = PARTLY
    else:
        verdict = NOT_REPRODUCED
    parts = [f"RNN ratio {rnn:.1e} at distance {T - 1}"]
    for g in ("lstm", "gru"):
        parts.append(
            f"{g.upper()} {ratio(g):.1e} ({ratio(g) / rnn:.0f}× the RNN's), trained accuracy "
            f"{variants[g]['accuracy_trained']:.2f} vs RNN "
            f"{variants['rnn']['accuracy_trained']:.2f} → remedy {'yes' if remedy[g] else 'no'}"
        )
    if "lstm-fb0" in variants:
        parts.append(f"LSTM with b_f = 0: {ratio('lstm-fb0'):.1e}")
    return _claim(key, statement, rule, verdict, "; ".join(parts) + ".", rec, *sources)


def attention_gap_verdict(first: float, last: float, growth_low: float | None = None) -> str:
    """The rule of "attention helps most on long sentences", from the attention models'
    lead (lc BLEU) on the shortest and on the longest source bucket: reproduced when the
    lead on the longest is > 0 and grows — the lower end of the bootstrap 95 % interval of
    (lead on the longest − lead on the shortest) is > 0, or without an interval, the lead
    on the longest is > the lead on the shortest; partly when the lead on the longest is
    only > 0; else not reproduced. Shared by ``benchmarks/bleu_by_length.py``."""
    grows = growth_low > 0 if growth_low is not None else last > first
    if last > 0 and grows:
        return REPRODUCED
    return PARTLY if last > 0 else NOT_REPRODUCED


def attention_long_sentences(rec: Records) -> Claim:
    key, statement = "attention-long", "Attention helps most on long sentences"
    rule = (
        "from bleu-by-length.json (test2016 beam output by source length): gap = mean lc "
        "BLEU of attention models − mean of Sutskever/Cho, per bucket. Reproduced: gap on the "
        "longest bucket > 0 and it grows (bootstrap 95 % interval of gap on the longest − "
        "gap on the shortest above 0; without an interval, gap longest > gap shortest); "
        "partly: gap on the longest > 0 only; else not reproduced."
    )
    data = rec.json("bleu-by-length.json")
    cmd = _cmd(data or {}, BY_LENGTH)
    sources = (
        Source("figure", "docs/figures/bleu-by-length.png", cmd),
        Source("record", "docs/figures/bleu-by-length.json", cmd),
    )
    gaps = (data or {}).get("gaps")
    if not gaps or gaps[0] is None or gaps[-1] is None:
        why = (
            "no record with models both with and without attention: run `"
            f"{TRANSLATION}` (all six models, or at least sutskever/cho and one attention "
            f"model), then `{BY_LENGTH}`."
        )
        return _claim(key, statement, rule, NOT_HERE, why, rec, *sources)
    first, last = gaps[0], gaps[-1]
    ci = (data or {}).get("growth_ci")
    verdict = attention_gap_verdict(first, last, ci[0] if ci else None)
    shape = ", ".join("–" if g is None else f"{g:+.1f}" for g in gaps)
    why = f"attention lead {first:+.1f} BLEU on the shortest, {last:+.1f} on the longest ({shape})"
    why += f"; growth 95 % interval [{ci[0]:+.1f}, {ci[1]:+.1f}]." if ci else "."
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def beam_vs_greedy(rec: Records) -> Claim:
    key, statement = "beam", "Beam search beats greedy decoding, and beam 1 is greedy"
    rule = (
        f"B=1 == greedy: the test `{BEAM_TEST}::{BEAM_TEST_NAME}` exists (it asserts equal "
        "tokens and scores). Beam beats greedy: in the Translation table of docs/results.md "
        "lc BLEU beam > lc BLEU greedy. Reproduced: the test exists and beam wins for every "
        "model; partly: the test exists and beam wins for some model or no table is "
        "recorded; else not reproduced."
    )
    has_test = f"def {BEAM_TEST_NAME}(" in rec.text(BEAM_TEST)
    body = find_section(rec.sections, "Translation") or ""
    rows = [r for t in tables(body) for r in t if column(r, "lc BLEU greedy") is not None]
    pairs = [
        (column(r, "model"), number(column(r, "lc BLEU greedy")), number(column(r, "lc BLEU beam")))
        for r in rows
    ]
    pairs = [p for p in pairs if p[1] is not None and p[2] is not None]
    heading = next((h for h in rec.sections if h.startswith("Translation")), "Translation")
    sources = (
        Source("table", f"docs/results.md#{heading}", TRANSLATION),
        Source("test", BEAM_TEST, f"pytest {BEAM_TEST} -k {BEAM_TEST_NAME}"),
    )
    wins = [p for p in pairs if p[2] > p[1]]
    test_txt = f"`{BEAM_TEST_NAME}` {'present' if has_test else 'MISSING'}"
    if not pairs:
        verdict = PARTLY if has_test else NOT_HERE
        why = f"{test_txt}; no translation table: run `{TRANSLATION}`."
        return _claim(key, statement, rule, verdict, why, rec, *sources)
    if has_test and len(wins) == len(pairs):
        verdict = REPRODUCED
    else:
        verdict = PARTLY if has_test and wins else NOT_REPRODUCED
    listed = "; ".join(f"{m}: greedy {g:.1f} → beam {b:.1f}" for m, g, b in pairs)
    why = f"{test_txt}; beam wins for {len(wins)} of {len(pairs)} models ({listed})."
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def depth_claim(
    points: dict[str, tuple[float, float | None]],
) -> tuple[bool, bool, bool, str]:
    """The rule of "deeper plain nets train worse; ResNets do not" (He 2016, Fig. 1 and 6)
    from (training loss, test error or None) of plain20, plain56, resnet20, resnet56 at one
    point (equal updates). Shared by ``benchmarks/vision.py`` and ``seqlab report``.

        A = plain-56 worse than plain-20: higher training loss and (when known) higher
            test error
        B = ResNet-56 trains better than plain-56: lower training loss
        C = ResNet-56 no worse than ResNet-20: test error ≤ (training loss ≤ when the
            errors are unknown)

    Returns (A, B, C, verdict): reproduced when A, B and C; partly when B and one of A, C;
    else not reproduced.
    """
    (lp20, ep20), (lp56, ep56) = points["plain20"], points["plain56"]
    (lr20, er20), (lr56, er56) = points["resnet20"], points["resnet56"]
    a = lp56 > lp20 and (ep56 is None or ep20 is None or ep56 > ep20)
    b = lr56 < lp56
    c = er56 <= er20 if er56 is not None and er20 is not None else lr56 <= lr20
    verdict = REPRODUCED if a and b and c else PARTLY if b and (a or c) else NOT_REPRODUCED
    return a, b, c, verdict


def deep_plain_nets(rec: Records) -> Claim:
    key, statement = "depth", "Deeper plain nets train worse; ResNets do not"
    rule = (
        "from vision-depth.json (MNIST, at equal updates): A = plain-56 training loss and test "
        "error > plain-20's; B = ResNet-56 training loss < plain-56's; C = ResNet-56 test "
        "error ≤ ResNet-20's. Reproduced: A, B and C; partly: B and one of A, C; else not "
        "reproduced (the rule of benchmarks/vision.py)."
    )
    data = rec.json("vision-depth.json")
    cmd = _cmd(data or {}, VISION)
    sources = (
        Source("figure", "docs/figures/depth.png", cmd),
        Source("record", "docs/figures/vision-depth.json", cmd),
        Source("figure", "docs/figures/gradflow-depth.png", GRADFLOW),
    )
    nets = (data or {}).get("nets", {})
    if not all(n in nets for n in ("plain20", "plain56", "resnet20", "resnet56")):
        why = f"no training-curve record: run `{VISION}`."
        grad = rec.json("gradflow.json")
        gnets = (grad or {}).get("depth", {}).get("nets", {})
        if "plain-56" in gnets and "resnet-56" in gnets:

            def spread(n: str) -> float:
                g = gnets[n]["block_input_grad_norm"]
                return g[0] / g[-1]

            why += (
                f" (At initialisation the gradient through depth is badly scaled in plain-56, "
                f"first/last block {spread('plain-56'):.2g}, vs ResNet-56 "
                f"{spread('resnet-56'):.2g}: context only, not the claim.)"
            )
        return _claim(key, statement, rule, NOT_HERE, why, rec, *sources)
    points = {n: (nets[n]["train_loss_at_step"], nets[n].get("test_error_at_step")) for n in nets}
    a, b, c, verdict = depth_claim(points)

    def fmt(n: str) -> str:
        loss, err = points[n]
        return f"{loss:.4f}" + ("" if err is None else f" / {100 * err:.2f} %")

    why = (
        f"training loss / test error at {data.get('step')} updates: plain-20 {fmt('plain20')}, "
        f"plain-56 {fmt('plain56')}, ResNet-20 {fmt('resnet20')}, ResNet-56 {fmt('resnet56')} "
        f"(A {'yes' if a else 'no'}, B {'yes' if b else 'no'}, C {'yes' if c else 'no'})."
    )
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def word_order(rec: Records) -> Claim:
    key, statement = "word-order", "Averaged embeddings miss word order where an RNN does not"
    rule = (
        "from sentiment-mr.json (MR contrast set, every fold model): A = at least one "
        "sentence that most averaged-embedding fold models get wrong and most fold models "
        "of a recurrent classifier (lstm, bilstm) get right; B = the best recurrent model's "
        "contrast-set accuracy > the averaged model's. Reproduced: A and B; partly: one of "
        "them; else not reproduced."
    )
    data = rec.json("sentiment-mr.json")
    cmd = _cmd(data or {}, CLASSIFY)
    sources = (
        Source("record", "docs/figures/sentiment-mr.json", cmd),
        Source("table", "docs/results.md#Sentiment (MR)", cmd),
    )
    models = {m["model"]: m for m in (data or {}).get("models", [])}
    recurrent = [models[m] for m in ("lstm", "bilstm") if m in models]
    contrast = (data or {}).get("contrast", [])
    if "avg" not in models or not recurrent or not contrast:
        why = (
            f"no 10-fold record with `avg` and `lstm`/`bilstm` on the contrast set: run `"
            f"{CLASSIFY} --models avg,lstm,bilstm` (docs/classification.md's fold-0 "
            "table is a hand-copied orientation, not a record)."
        )
        return _claim(key, statement, rule, NOT_HERE, why, rec, *sources)

    def folds(m: dict) -> int:
        return len(m["accuracy"])

    def acc(m: dict) -> float:
        return sum(m["contrast_right"]) / (len(contrast) * folds(m))

    avg = models["avg"]
    marked = [
        c["text"]
        for i, c in enumerate(contrast)
        if 2 * avg["contrast_right"][i] < folds(avg)
        and any(2 * m["contrast_right"][i] > folds(m) for m in recurrent)
    ]
    best = max(recurrent, key=acc)
    a, b = bool(marked), acc(best) > acc(avg)
    verdict = REPRODUCED if a and b else PARTLY if a or b else NOT_REPRODUCED
    example = f' (e.g. "{marked[0]}")' if marked else ""
    why = (
        f"{len(marked)} of {len(contrast)} sentences wrong for most `avg` folds and right for "
        f"most folds of a recurrent model{example}; contrast accuracy `{best['model']}` "
        f"{100 * acc(best):.0f} % vs `avg` {100 * acc(avg):.0f} %."
    )
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def coverage_repetition(rec: Records) -> Claim:
    key, statement = "coverage", "Coverage reduces repetition"
    rule = (
        "from pointer-generator.json (the same preset without and with coverage, test2016; "
        "with coverage added as a final phase, against the plain model trained as long "
        "without it): repeated-trigram rate of the output. Reproduced: coverage's rate ≤ "
        f"{COVERAGE_CUT:g} × the plain one; partly: lower but by less than that; else not "
        "reproduced."
    )
    data = rec.json("pointer-generator.json")
    cmd = _cmd(data or {}, POINTER_GEN)
    sources = (
        Source("record", "docs/figures/pointer-generator.json", cmd),
        Source("table", "docs/results.md#Pointer-generator (Multi30k de→en, test2016)", cmd),
    )
    by = {r["variant"]: r["metrics"] for r in (data or {}).get("rows", [])}
    if "plain" not in by or "coverage" not in by:
        why = f"no record of both variants: run `{POINTER_GEN}`."
        return _claim(key, statement, rule, NOT_HERE, why, rec, *sources)
    base = by.get("plain+", by["plain"])  # the equal-budget control when the record has it
    plain, cov = base["repeat_trigram"], by["coverage"]["repeat_trigram"]
    if plain > 0 and cov <= COVERAGE_CUT * plain:
        verdict = REPRODUCED
    else:
        verdict = PARTLY if cov < plain else NOT_REPRODUCED
    ref = base.get("ref_repeat_trigram")
    why = f"repeated trigrams {plain:.2f} % without coverage → {cov:.2f} % with" + (
        f" (references {ref:.2f} %)." if ref is not None else "."
    )
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def pointer_generalisation(rec: Records) -> Claim:
    key = "pointer-longer"
    statement = "Pointer networks generalise to longer inputs than seq2seq"
    rule = (
        "from pointers.json (convex hull, both trained on n = 10): at every test n larger "
        "than the training n, `hull10` (Ptr-Net) vs `hull-baseline` (attention seq2seq): "
        "coverage higher AND exact accuracy not lower. Reproduced: at every such n; partly: "
        "at some n, or on one of the two metrics; else not reproduced."
    )
    data = rec.json("pointers.json")
    cmd = _cmd(data or {}, POINTERS)
    sources = (
        Source("record", "docs/figures/pointers.json", cmd),
        Source("table", "docs/results.md#Pointer networks", cmd),
    )
    by = {r["preset"]: r for r in (data or {}).get("results", [])}
    ptr, base = by.get("hull10"), by.get("hull-baseline")
    train_n = max(int(x) for x in str((ptr or {}).get("train_n", "0")).split("–"))
    longer = [
        n
        for n in (ptr or {}).get("test_n", [])
        if n > train_n and base is not None and f"exact_n{n}" in base["test"]
    ]
    if ptr is None or base is None or not longer:
        why = f"no record of both hull presets at n > training n: run `{POINTERS}`."
        return _claim(key, statement, rule, NOT_HERE, why, rec, *sources)
    wins, some, parts = 0, 0, []
    for n in longer:
        p, b = ptr["test"], base["test"]
        cov = p[f"coverage_n{n}"] > b[f"coverage_n{n}"]
        ex = p[f"exact_n{n}"] >= b[f"exact_n{n}"]
        wins += cov and ex
        some += cov or ex
        parts.append(
            f"n = {n}: exact {100 * p[f'exact_n{n}']:.1f} % vs {100 * b[f'exact_n{n}']:.1f} %, "
            f"coverage {100 * p[f'coverage_n{n}']:.1f} % vs {100 * b[f'coverage_n{n}']:.1f} %"
        )
    verdict = REPRODUCED if wins == len(longer) else PARTLY if some else NOT_REPRODUCED
    why = "Ptr-Net vs seq2seq, " + "; ".join(parts) + "."
    return _claim(key, statement, rule, verdict, why, rec, *sources)


def _rules() -> list:
    from seqlab.inspect.claim_rules_cost import (
        dot_vs_additive,
        sinusoidal_offsets,
        transformer_cost,
    )

    return [
        vanishing_gradients,
        attention_long_sentences,
        beam_vs_greedy,
        deep_plain_nets,
        transformer_cost,
        sinusoidal_offsets,
        dot_vs_additive,
        word_order,
        coverage_repetition,
        pointer_generalisation,
    ]


RULES = _rules()
