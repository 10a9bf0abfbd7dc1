"""``seqlab embed``: train, evaluate and inspect word vectors (word2vec text files).

    seqlab embed train {sgns,glove,ppmi,embed/NAME,FILE.yaml}
        [--data-dir DIR [--sources S,…] | --text FILE] [--out FILE.txt] [--dim D]
        [--epochs N] [--minutes M] [--window W] [--min-count C] [--seed S]
        [--glove-adagrad {paper,glove.c}]
    seqlab embed eval FILE.txt [--data-dir DIR]
    seqlab embed neighbours FILE.txt WORD [-k K]
    seqlab embed tsne FILE.txt --words W1 W2 … --out MAP.png

``train`` builds the corpus (PTB train + Multi30k English train + MR by default;
``--sources ptb,multi30k,mr,conll`` adds the CoNLL-2003 train split; or any ``--text``
file), trains, writes the vectors and prints what it did. A preset (``embed/sgns``: the
settings of docs/results.md's table, ``seqlab.cli.embed_presets``) sets the method and
its flags; flags given on the command line win. ``eval`` prints the analogy
(questions-words, 3CosAdd) and similarity (SimLex-999, WordSim-353) table with coverages.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError

METHODS = ("sgns", "glove", "ppmi")
# Per-method defaults, from the papers (window: Mikolov 5, Pennington 10; GloVe epochs:
# 50 for dimension < 300) and tuning on the ~1.4M-token corpus here (docs/embeddings.md).
DEFAULTS: dict[str, dict[str, Any]] = {
    "sgns": {"window": 5, "epochs": 10},
    "glove": {"window": 10, "epochs": 50},
    "ppmi": {"window": 5, "epochs": 1},
}


def _data_dir(value: str | None) -> Path:
    from seqlab import api

    if value:
        return Path(value)
    found = api.default_data_dir()
    if found is None:
        raise SeqlabError(
            "no data folder: pass --data-dir DIR (the shared datasets) or --text FILE"
        )
    return found


def train_vectors(
    method: str,
    *,
    data_dir: str | Path | None = None,
    text: str | Path | None = None,
    dim: int = 100,
    epochs: int | None = None,
    minutes: float | None = None,
    window: int | None = None,
    min_count: int = 5,
    seed: int = 0,
    log: Any = None,
    glove_adagrad: str = "paper",
    sources: Any = None,
    subsample: float | None = None,
) -> Any:
    """Build the corpus and train ``method``; returns ``TrainedVectors`` (library form of
    ``seqlab embed train``)."""
    import torch

    from seqlab.data.embedding_corpus import (
        SOURCES,
        build_corpus,
        read_embedding_sentences,
        read_text_sentences,
    )

    if method not in METHODS:
        raise SeqlabError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if subsample is not None and not (method == "glove" and 0.0 < subsample < 1.0):
        raise SeqlabError(
            f"--subsample {subsample}: subsampling before counting is for glove, with a "
            "threshold t in (0, 1) such as 1e-4 (sgns always subsamples, t = 1e-4; ppmi "
            "does not)"
        )
    torch.manual_seed(seed)
    sentences = (
        read_text_sentences(text)
        if text is not None
        else read_embedding_sentences(
            _data_dir(str(data_dir) if data_dir else None), tuple(sources or SOURCES)
        )
    )
    corpus = build_corpus(sentences, min_count=min_count)
    if log is not None:
        log(f"corpus: {len(sentences):,} sentences, {corpus.n_tokens:,} tokens, V = {corpus.V:,}")
    window = window or DEFAULTS[method]["window"]
    epochs = epochs or DEFAULTS[method]["epochs"]
    if method == "sgns":
        from seqlab.models.word2vec import train_sgns

        return train_sgns(corpus, dim, window, epochs=epochs, minutes=minutes, seed=seed, log=log)
    if method == "glove":
        from seqlab.models.glove import train_glove

        return train_glove(
            corpus,
            dim,
            window,
            epochs=epochs,
            minutes=minutes,
            seed=seed,
            log=log,
            adagrad=glove_adagrad,  # type: ignore[arg-type]
            subsample=subsample,
        )
    from seqlab.models.ppmi_svd import train_ppmi_svd

    return train_ppmi_svd(corpus, dim, window, seed=seed)


def _cmd_train(args: argparse.Namespace) -> int:
    from seqlab.cli.embed_presets import apply_preset
    from seqlab.data.word_vectors_io import save_word2vec_text

    apply_preset(args, METHODS)

    if args.dim < 1 or (args.epochs is not None and args.epochs < 1):
        raise SeqlabError("--dim and --epochs must be >= 1")
    if args.text and args.sources:
        raise SeqlabError("--sources picks parts of the --data-dir corpus; drop it with --text")
    out = Path(args.out or f"{args.method}.txt")
    run = train_vectors(
        args.method,
        data_dir=args.data_dir,
        text=args.text,
        dim=args.dim,
        epochs=args.epochs,
        minutes=args.minutes,
        window=args.window,
        min_count=args.min_count,
        seed=args.seed,
        log=None if args.quiet else print,
        glove_adagrad=args.glove_adagrad,
        sources=[x for x in args.sources.split(",") if x] if args.sources else None,
        subsample=args.subsample,
    )
    save_word2vec_text(run.vectors, out)
    print(
        f"{args.method}: {len(run.vectors):,} words × {run.vectors.dim} dims, "
        f"{run.epochs:.2f} epochs in {run.seconds:.1f} s → {out}"
    )
    return 0


def format_eval_table(scores: dict[str, float]) -> str:
    """The markdown table ``seqlab embed eval`` prints (scores of ``evaluate_standard``)."""
    rows = [
        ("analogy (questions-words), all", scores["analogy_acc"], scores["analogy_coverage"]),
        ("analogy, semantic", scores["analogy_sem_acc"], None),
        ("analogy, syntactic", scores["analogy_syn_acc"], None),
        ("SimLex-999 Spearman ρ", scores["simlex_rho"], scores["simlex_coverage"]),
        ("WordSim-353 Spearman ρ", scores["ws353_rho"], scores["ws353_coverage"]),
    ]
    lines = ["| metric | value | coverage |", "|---|---|---|"]
    for name, value, coverage in rows:
        shown = f"{100 * value:.1f}%" if name.startswith("analogy") else f"{value:.3f}"
        cov = "" if coverage is None else f"{100 * coverage:.1f}%"
        lines.append(f"| {name} | {shown} | {cov} |")
    lines.append(
        f"\nAnalogy accuracy is over covered questions (3CosAdd); over all questions "
        f"{100 * scores['analogy_acc_of_total']:.1f}%."
    )
    return "\n".join(lines)


def _cmd_eval(args: argparse.Namespace) -> int:
    from seqlab.data.word_vectors_io import load_word2vec_text
    from seqlab.eval.word_vectors import evaluate_standard

    wv = load_word2vec_text(args.path)
    print(f"{args.path}: {len(wv):,} words × {wv.dim} dims")
    print(format_eval_table(evaluate_standard(wv, _data_dir(args.data_dir))))
    return 0


def _cmd_neighbours(args: argparse.Namespace) -> int:
    from seqlab.data.word_vectors_io import load_word2vec_text
    from seqlab.eval.word_vectors import nearest_neighbours

    wv = load_word2vec_text(args.path)
    for word, cos in nearest_neighbours(wv, args.word.lower(), args.k):
        print(f"{word}\t{cos:.4f}")
    return 0


def _cmd_tsne(args: argparse.Namespace) -> int:
    from seqlab.data.word_vectors_io import load_word2vec_text
    from seqlab.eval.word_vectors import tsne_plot

    wv = load_word2vec_text(args.path)
    words = [w.lower() for w in args.words]
    plotted = tsne_plot(wv, words, args.out, seed=args.seed)
    missing = [w for w in dict.fromkeys(words) if w not in wv]
    print(f"plotted {len(plotted)} words → {args.out}")
    if missing:
        print(f"not in the vectors: {' '.join(missing)}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``embed`` (train | eval | neighbours | tsne) on the top-level parser."""
    p = sub.add_parser("embed", help="word embeddings: train, eval, neighbours, tsne")
    inner = p.add_subparsers(dest="embed_command", metavar="SUBCOMMAND", required=True)

    t = inner.add_parser("train", help="train word vectors, write word2vec text format")
    t.add_argument(
        "method",
        metavar="METHOD_OR_PRESET",
        help=f"{', '.join(METHODS)}, or a preset: embed/sgns (configs/embed/*.yaml) or a YAML file",
    )
    t.add_argument("--data-dir", help="shared data folder (default ../shared/data)")
    t.add_argument("--text", help="train on this text file instead (one sentence a line)")
    t.add_argument(
        "--sources",
        help="comma-separated corpus parts under --data-dir: ptb, multi30k, mr, conll "
        "(CoNLL-2003 train only); default ptb,multi30k,mr",
    )
    t.add_argument("--out", help="output file (default METHOD.txt)")
    t.add_argument("--dim", type=int, help="vector size (default 100)")
    t.add_argument("--epochs", type=int, help="passes (default: sgns 10, glove 50)")
    t.add_argument("--minutes", type=float, help="stop training after this many minutes")
    t.add_argument("--window", type=int, help="context radius (default: sgns/ppmi 5, glove 10)")
    t.add_argument("--min-count", type=int, help="drop rarer words (default 5)")
    t.add_argument("--seed", type=int, help="default 0")
    t.add_argument(
        "--glove-adagrad",
        choices=("paper", "glove.c"),
        help="GloVe's AdaGrad: the paper's (accumulator from 0; default) or glove.c's (from "
        "1/lr^2)",
    )
    t.add_argument(
        "--subsample",
        type=float,
        metavar="T",
        help="glove: drop frequent words' occurrences before counting, word2vec's "
        "threshold t (e.g. 1e-4; default off)",
    )
    t.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    t.set_defaults(func=_cmd_train)

    e = inner.add_parser("eval", help="analogy + similarity table of a vector file")
    e.add_argument("path", metavar="FILE.txt")
    e.add_argument("--data-dir", help="where the evaluation sets are (default ../shared/data)")
    e.set_defaults(func=_cmd_eval)

    n = inner.add_parser("neighbours", help="nearest neighbours of a word by cosine")
    n.add_argument("path", metavar="FILE.txt")
    n.add_argument("word")
    n.add_argument("-k", type=int, default=10)
    n.set_defaults(func=_cmd_neighbours)

    s = inner.add_parser("tsne", help="t-SNE map of chosen words as PNG")
    s.add_argument("path", metavar="FILE.txt")
    s.add_argument("--words", nargs="+", required=True)
    s.add_argument("--out", required=True, metavar="MAP.png")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_cmd_tsne)
