"""``task.coverage_penalty`` (GNMT's cp in beam search, seqlab.decode.beam; the search
itself is tested in tests/decode/test_coverage_penalty.py): decode_copy hands it to the
search with the model's attention coverage, greedy ignores it, β = 0 is the default
decoding, the config refuses bad values, and the task's evaluate / translate use it."""

from __future__ import annotations

import math

import pytest

from seqlab.tasks.copy_translation import CopyTranslationConfig, CopyTranslationTask
from seqlab.tasks.copy_translation_decode import decode_copy
from tests.tasks.test_copy_translation_unk import (
    decode_as_before,
    examples,
    files,  # noqa: F401  (fixture)
    seeded_model,
    settings,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_decode_copy_searches_with_the_coverage_penalty():
    model, exs = seeded_model(5), examples()
    outputs = {}
    for beta in (0.0, 0.2, 20.0):
        got = [ids for ids, _ in decode_copy(model, exs, settings(3), coverage_penalty=beta)]
        want = decode_as_before(
            model, exs, 3, coverage_penalty=beta, coverage=model.attention_coverage
        )
        assert got == want
        outputs[beta] = got
    plain = [ids for ids, _ in decode_copy(model, exs, settings(3))]
    assert outputs[0.0] == plain  # β = 0 is the default decoding
    assert outputs[20.0] != plain  # a strong penalty changes some output on this model
    greedy_plain = [ids for ids, _ in decode_copy(model, exs, settings(1))]
    greedy_cp = [ids for ids, _ in decode_copy(model, exs, settings(1), coverage_penalty=20.0)]
    assert greedy_cp == greedy_plain  # GNMT's cp ranks finished beam hypotheses only


@pytest.mark.parametrize("bad", [-0.1, math.inf, math.nan])
def test_config_refuses_a_bad_coverage_penalty(bad):
    with pytest.raises(ValueError, match="task.coverage_penalty must be a finite number >= 0"):
        CopyTranslationConfig(coverage_penalty=bad)
    assert CopyTranslationConfig().coverage_penalty == 0.0  # off by default, as in See et al.


def test_task_evaluate_and_translate_use_it(files):  # noqa: F811
    outputs = {}
    for beta in (0.0, 20.0):
        cfg = CopyTranslationConfig(
            data="files",
            tgt_vocab_size=10,
            src_min_freq=1,
            test_beam=3,
            coverage_penalty=beta,
            **files,
        )
        task = CopyTranslationTask(cfg, None, 0)
        task.prepare()
        model = seeded_model(4, **task.model_kwargs())
        sources = ["Ein Mann namens Zyxwq läuft.", "Ein Mann läuft und läuft ."]
        outputs[beta] = (task.evaluate(model, "test")["bleu_lc"], task.translate(model, sources, 3))
    assert outputs[0.0] != outputs[20.0]
