"""Sequence-level knowledge distillation for the ``copy_translation`` task.

Kim & Rush 2016, "Sequence-Level Knowledge Distillation" (EMNLP), §3.2: a student is
trained on the teacher's beam-search output instead of the references,

    L_SEQ-KD = −log p_student(ŷ | x),   ŷ = beam search of the teacher on x  (≈ its mode),

for every training source x. The teacher here is a run or an ensemble of runs
(``seqlab.models.pointer_generator_ensemble``: its mode is that of the linear pool, so one
student can learn what a pool of runs decodes).

Two halves:

* :func:`distill_lines`: the teacher decodes every raw training source (file order, before
  the ``max_train_examples`` and ``max_len`` cuts) and each output becomes one line of
  space-separated words. The decoding is the paper's: ``block_unk``, ``replace_unk`` and
  ``unk_to_copy`` are off whatever the run's config says, so where the teacher emits
  ``<unk>`` the student's target has ``<unk>``, as a reference does for a word outside the
  target vocabulary that the source lacks. (With ``unk_to_copy`` the teacher would copy a
  German word wherever the reference has a rare English one, and teach the student to.)
* :func:`read_distilled`: the task's ``distill_tgt`` file, checked against the training
  split (one line per raw pair), tokenised as the references are, ``<unk>`` kept. The
  task builds its vocabularies from the references first, so a student shares its
  teacher's vocabularies and a word's copy id is assigned as for a reference.

Shapes: a training source x is S words; ŷ is at most ⌊max_len_a·S⌋ + max_len_b words.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqlab.data.oov import extended_to_words
from seqlab.data.readers import read_parallel
from seqlab.data.vocab import UNK
from seqlab.errors import DataError, SeqlabError
from seqlab.tasks.copy_translation_decode import decode_copy

__all__ = ["distill_lines", "read_distilled"]

log = logging.getLogger(__name__)

CHUNK = 1000  # training sources decoded per call (progress is reported between them)


def read_distilled(
    path: str | Path, n_pairs: int, tokenize: Callable[[str], list[str]]
) -> list[list[str]]:
    """The targets of a ``distill_tgt`` file: line i (1-based) → the words of training
    pair i, each whitespace-separated token tokenised as the references are (so raw text
    works too) and ``<unk>`` kept as the unknown word. The file must have exactly
    ``n_pairs`` lines, the number of raw training pairs."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise DataError(
            f"task.distill_tgt: {path} does not exist",
            hint="write it with `seqlab distill TEACHER_RUN --out FILE`",
        ) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"task.distill_tgt: {path} is not UTF-8 text ({exc.reason})") from None
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if len(lines) != n_pairs:
        raise DataError(
            f"task.distill_tgt: {path} has {len(lines)} lines but the training split has "
            f"{n_pairs} pairs; line i must be the target of training pair i",
            hint="write it from the same training data with `seqlab distill`",
        )
    out = []
    for line in lines:
        words: list[str] = []
        for token in line.split():
            words.extend([UNK] if token == UNK else tokenize(token))
        out.append(words)
    return out


@torch.no_grad()
def distill_lines(
    task: Any,
    model: nn.Module,
    beam: int = 4,
    progress: Callable[[int, int], None] | None = None,
    **search: Any,
) -> list[str]:
    """The teacher's (``model``'s) beam-search translation of every raw training source of
    ``task`` (a loaded ``copy_translation`` task), one line of space-separated words each,
    in file order; ``<unk>`` where the teacher emits it (module docstring). ``search``:
    max_len_a, max_len_b, length_penalty (default: the run's); the run's
    ``coverage_penalty`` applies. ``progress(done, total)`` is called after each chunk."""
    from seqlab.tasks.copy_translation import CopyTranslationTask

    if not isinstance(task, CopyTranslationTask):
        raise SeqlabError(
            f"distill: the run's task is {type(task).__name__}; distillation is built for "
            "copy_translation runs (the pointer-generator) only"
        )
    src_path, tgt_path = task._paths()["train"]
    sources = [s for s, _ in read_parallel(src_path, tgt_path)]
    settings = task._settings(beam, **search)
    cfg = task.cfg
    was_training = model.training
    model.eval()
    lines: list[str] = []
    try:
        for start in range(0, len(sources), CHUNK):
            examples = task._examples_of(sources[start : start + CHUNK])
            decoded = decode_copy(
                model,
                examples,
                settings,
                False,  # block_unk
                False,  # replace_unk
                None,  # unk_to_copy
                cfg.coverage_penalty,
                cfg.coverage_penalty_words,
            )
            lines += [
                " ".join(extended_to_words(ids, task.tgt_vocab, e.oovs))
                for (ids, _), e in zip(decoded, examples)
            ]
            if progress is not None:
                progress(len(lines), len(sources))
    finally:
        model.train(was_training)
    log.info("distilled %d training sources (beam %d)", len(lines), beam)
    return lines
