"""Intrinsic evaluation of word vectors: analogies, similarity, neighbours, t-SNE.

- Analogy (Mikolov et al. 2013a, questions-words): for a : b :: c : d predict
  d̂ = argmax_{w ∉ {a, b, c}} cos(w, b − a + c)   (3CosAdd; Levy & Goldberg 2014 name),
  with every vector L2-normalised first. A question is *covered* when all four words are
  in the vocabulary (after lower-casing); accuracy is over covered questions, and also
  reported over all questions (uncovered ones count as wrong). Sections whose name starts
  with ``gram`` are syntactic, the others semantic (Mikolov's split).
- Similarity: Spearman ρ between human scores and cos(w1, w2) over the covered pairs
  (``scipy.stats.spearmanr``), for SimLex-999 (Hill et al. 2015) and WordSim-353
  (Finkelstein et al. 2002).
- Nearest neighbours by cosine; a t-SNE map (van der Maaten & Hinton 2008; scikit-learn's
  ``TSNE``) of chosen words saved as PNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from scipy.stats import spearmanr
from torch import Tensor

from seqlab.data.readers import read_lines
from seqlab.data.word_vectors_io import WordVectors
from seqlab.errors import DataError

__all__ = [
    "AnalogyResult",
    "SimilarityResult",
    "analogy_accuracy",
    "evaluate_standard",
    "nearest_neighbours",
    "read_analogies",
    "read_word_pairs",
    "similarity_spearman",
    "three_cos_add",
    "tsne_plot",
]

Question = tuple[str, str, str, str]
Part = Literal["all", "semantic", "syntactic"]


def read_analogies(path: str | Path, *, lowercase: bool = True) -> dict[str, list[Question]]:
    """questions-words format: ``: section`` headers, then lines ``a b c d``."""
    sections: dict[str, list[Question]] = {}
    current: str | None = None
    for n, line in enumerate(read_lines(path, allow_empty_lines=True), 1):
        if not line.strip():
            continue
        if line.startswith(":"):
            current = line[1:].strip()
            sections.setdefault(current, [])
            continue
        words = line.lower().split() if lowercase else line.split()
        if len(words) != 4:
            raise DataError(
                f"analogy line has {len(words)} words, expected 4 (a b c d)",
                path=path,
                line=n,
                hint="each question is 'a b c d' meaning a:b :: c:d",
            )
        if current is None:
            raise DataError(
                "question before the first ': section' header",
                path=path,
                line=n,
                hint="start the file with a line like ': capital-common-countries'",
            )
        sections[current].append((words[0], words[1], words[2], words[3]))
    if not any(sections.values()):
        raise DataError("no analogy questions found", path=path, hint="is this questions-words?")
    return sections


def three_cos_add(E: Tensor, a: Tensor, b: Tensor, c: Tensor, chunk: int = 1024) -> Tensor:
    """d̂ = argmax_{w ∉ {a,b,c}} cos(E_w, b − a + c) with unit-norm rows E (3CosAdd).

    Since E's rows are unit vectors, cos(E_w, x) ranks as E_w · x, so the target need not
    be normalised.

    Shapes:
        E: (V, D) unit rows   a, b, c: (Q,) long   returns: (Q,) long
    """
    out = []
    for s in range(0, a.numel(), chunk):
        ia, ib, ic = a[s : s + chunk], b[s : s + chunk], c[s : s + chunk]  # (q,)
        target = E[ib] - E[ia] + E[ic]  # (q, D)
        scores = target @ E.T  # (q, V)
        rows = torch.arange(ia.numel())  # (q,)
        for excluded in (ia, ib, ic):
            scores[rows, excluded] = float("-inf")
        out.append(scores.argmax(-1))  # (q,)
    return torch.cat(out) if out else torch.empty(0, dtype=torch.long)  # (Q,)


@dataclass
class AnalogyResult:
    """Correct / covered / total counts per section; accuracies in [0, 1]."""

    sections: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def _sum(self, part: Part) -> tuple[int, int, int]:
        """(correct, covered, total) over the sections of ``part`` (``gram*`` = syntactic)."""
        rows = [
            v
            for k, v in self.sections.items()
            if part == "all" or k.startswith("gram") == (part == "syntactic")
        ]
        return (sum(r[0] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows))

    def accuracy(self, part: Part = "all", *, of: Literal["covered", "total"] = "covered") -> float:
        """Correct / covered questions (or / all questions with ``of="total"``)."""
        correct, covered, total = self._sum(part)
        denominator = covered if of == "covered" else total
        return correct / denominator if denominator else 0.0

    def coverage(self, part: Part = "all") -> float:
        """Covered / all questions."""
        _, covered, total = self._sum(part)
        return covered / total if total else 0.0


def analogy_accuracy(
    wv: WordVectors, questions: dict[str, list[Question]], max_vocab: int | None = None
) -> AnalogyResult:
    """3CosAdd accuracy per section; with ``max_vocab`` only the first (most frequent)
    ``max_vocab`` words are candidates and count as covered (Mikolov's 30k restriction)."""
    V = len(wv) if max_vocab is None else min(max_vocab, len(wv))
    E = wv.normalized()[:V]  # (V, D)
    index = {w: i for w, i in wv.index.items() if i < V}
    result = AnalogyResult()
    for name, qs in questions.items():
        covered = [q for q in qs if all(w in index for w in q)]
        if covered:
            ids = torch.tensor([[index[w] for w in q] for q in covered])  # (Q, 4)
            pred = three_cos_add(E, ids[:, 0], ids[:, 1], ids[:, 2])  # (Q,)
            correct = int((pred == ids[:, 3]).sum())
        else:
            correct = 0
        result.sections[name] = (correct, len(covered), len(qs))
    return result


def read_word_pairs(
    path: str | Path, score_column: str | None = None
) -> list[tuple[str, str, float]]:
    """Word-similarity pairs ``(w1, w2, score)``, lower-cased.

    The file has a header row and tab- or comma-separated columns (SimLex-999's
    ``SimLex-999.txt``, WordSim-353's ``combined.csv``/``.tab``); the words are the first two
    columns, the score the column named ``score_column`` (default ``SimLex999`` when present,
    else the third column).
    """
    lines = read_lines(path, allow_empty_lines=True)
    sep = "\t" if "\t" in lines[0] else ","
    header = [h.strip() for h in lines[0].split(sep)]
    name = score_column or ("SimLex999" if "SimLex999" in header else None)
    if name is not None and name not in header:
        raise DataError(
            f"no column {name!r} in the header {header}",
            path=path,
            line=1,
            hint="pass score_column=",
        )
    col = header.index(name) if name is not None else 2
    pairs = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(sep)]
        if len(fields) <= max(col, 1):
            raise DataError(
                f"found {len(fields)} columns, expected at least {max(col, 1) + 1}",
                path=path,
                line=n,
                hint=f"columns are separated by {sep!r} as in the header",
            )
        try:
            score = float(fields[col])
        except ValueError:
            raise DataError(
                f"score {fields[col]!r} is not a number", path=path, line=n, hint="check the file"
            ) from None
        pairs.append((fields[0].lower(), fields[1].lower(), score))
    if not pairs:
        raise DataError("no word pairs found", path=path, hint="the file has only a header")
    return pairs


@dataclass
class SimilarityResult:
    rho: float
    covered: int
    total: int

    @property
    def coverage(self) -> float:
        return self.covered / self.total if self.total else 0.0


def similarity_spearman(wv: WordVectors, pairs: list[tuple[str, str, float]]) -> SimilarityResult:
    """Spearman ρ between human scores and cosine similarity over covered pairs (ties get
    average ranks, ``scipy.stats.spearmanr``); ρ = nan when fewer than 2 pairs are covered."""
    covered = [(a, b, s) for a, b, s in pairs if a in wv and b in wv]
    if len(covered) < 2:
        return SimilarityResult(float("nan"), len(covered), len(pairs))
    E = wv.normalized()  # (V, D)
    ia = torch.tensor([wv.index[a] for a, _, _ in covered])  # (P,)
    ib = torch.tensor([wv.index[b] for _, b, _ in covered])  # (P,)
    cos = (E[ia] * E[ib]).sum(-1)  # (P,)
    rho = spearmanr([s for _, _, s in covered], cos.tolist()).statistic
    return SimilarityResult(float(rho), len(covered), len(pairs))


def nearest_neighbours(wv: WordVectors, word: str, k: int = 10) -> list[tuple[str, float]]:
    """The ``k`` words with the highest cosine similarity to ``word`` (itself excluded)."""
    if word not in wv:
        raise DataError(
            f"word {word!r} is not in the vectors ({len(wv)} words)",
            hint="words are lower-cased when trained by seqlab; try another word",
        )
    E = wv.normalized()  # (V, D)
    cos = E @ E[wv.index[word]]  # (V,)
    cos[wv.index[word]] = float("-inf")
    top = torch.topk(cos, min(k, len(wv) - 1))
    return [(wv.words[int(i)], float(s)) for s, i in zip(top.values, top.indices)]


def tsne_plot(
    wv: WordVectors,
    words: list[str],
    out: str | Path,
    *,
    seed: int = 0,
    perplexity: float | None = None,
    groups: Sequence[str] | None = None,
) -> list[str]:
    """Save a 2-D t-SNE map (cosine metric) of ``words`` found in ``wv`` as a PNG; return
    the words plotted. Perplexity defaults to min(30, (n − 1) / 3) (it must be < n).
    ``groups``: a label per word (same length as ``words``); each group gets its own
    colour and a legend entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    if groups is not None and len(groups) != len(words):
        raise ValueError(f"groups has {len(groups)} labels for {len(words)} words")
    group_of = dict(zip(words, groups)) if groups is not None else {}
    found = [w for w in dict.fromkeys(words) if w in wv]
    if len(found) < 3:
        raise DataError(
            f"only {len(found)} of the words are in the vectors", hint="give at least 3 known words"
        )
    X = wv.vectors[[wv.index[w] for w in found]].double().numpy()  # (n, D)
    p = perplexity if perplexity is not None else min(30.0, (len(found) - 1) / 3)
    Y = TSNE(2, perplexity=p, metric="cosine", init="pca", random_state=seed).fit_transform(X)
    fig, ax = plt.subplots(figsize=(8, 8))
    if group_of:
        for g in dict.fromkeys(group_of[w] for w in found):
            rows = [i for i, w in enumerate(found) if group_of[w] == g]
            ax.scatter(Y[rows, 0], Y[rows, 1], s=16, label=g)
        ax.legend(loc="best", fontsize=8)
    else:
        ax.scatter(Y[:, 0], Y[:, 1], s=12)
    for w, (x, y) in zip(found, Y):
        ax.annotate(w, (x, y), fontsize=9, xytext=(2, 2), textcoords="offset points")
    ax.set_title(f"t-SNE of {len(found)} word vectors (perplexity {p:.1f})")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return found


def evaluate_standard(wv: WordVectors, data_dir: str | Path) -> dict[str, float]:
    """Analogy (questions-words), SimLex-999 and WordSim-353 (combined) from ``data_dir``:
    accuracies and ρ with coverages, as a flat dict."""
    root = Path(data_dir)
    an = analogy_accuracy(wv, read_analogies(root / "word2vec_analogy" / "questions-words.txt"))
    out = {
        "analogy_acc": an.accuracy("all"),
        "analogy_sem_acc": an.accuracy("semantic"),
        "analogy_syn_acc": an.accuracy("syntactic"),
        "analogy_acc_of_total": an.accuracy("all", of="total"),
        "analogy_coverage": an.coverage("all"),
    }
    for key, path in (
        ("simlex", root / "simlex999" / "SimLex-999.txt"),
        ("ws353", root / "wordsim353" / "combined.csv"),
    ):
        r = similarity_spearman(wv, read_word_pairs(path))
        out[f"{key}_rho"], out[f"{key}_coverage"] = r.rho, r.coverage
    return out
