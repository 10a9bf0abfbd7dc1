"""benchmarks/decode_drop_done.py end to end on a tiny task (the generated parallel files
of tests/tasks/test_translation.py): both variants translate, the translations are
identical, and dropping done inputs decodes fewer rows with the same decoder calls."""

import argparse

import torch

from benchmarks import decode_drop_done as bench
from benchmarks.decode_row_limits import train_briefly
from seqlab.tasks import translation_eval
from seqlab.tasks.translation import TranslationTask
from tests.tasks.test_translation import _config


def test_keep_and_drop_translate_alike_and_drop_decodes_fewer_rows(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        task = TranslationTask(_config(tmp_path))
        task.prepare()
        model = train_briefly(task, 2.0, 32, 1)
        args = argparse.Namespace(sentences=30, beam=3, reps=1)
        rows = bench.measure(task, model, args)
    finally:
        torch.set_num_threads(threads)
    assert "identical translations: 30 / 30" in rows[0]
    table = {r.split("|")[1].strip(): r.split("|")[2:4] for r in rows if r.startswith("| ")}
    keep_calls, keep_rows = (int(x.replace(",", "")) for x in table["keep"])
    drop_calls, drop_rows = (int(x.replace(",", "")) for x in table["drop"])
    assert keep_calls == drop_calls > 0 and drop_rows < keep_rows
    assert translation_eval.beam_search is bench.beam_search  # the library's, restored
    assert translation_eval.greedy is bench.greedy
