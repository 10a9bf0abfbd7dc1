"""``seqlab translate`` on a pointer-generator (copy_translation) run: text out, one line
per input, equal to the task's own ``translate``; ``--coverage-penalty`` reaches the run's
β; an ensemble translates; the per-hypothesis flags are refused in one line."""

import io

import pytest
import torch

from benchmarks import pointer_generator as bench
from seqlab import api
from seqlab.cli.main import main
from tests.test_benchmark_pointer_generator_reuse import trained_run  # noqa: F401  (fixture)

SENTENCES = ["ein mann namens boa läuft .", "ein mann namens zyxwq läuft ."]


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_translate_prints_the_tasks_translations(trained_run, capsys, monkeypatch):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    loaded = api.load(run)
    want = loaded.task.translate(loaded.model, SENTENCES, beam=2)
    assert main(["translate", str(run), *SENTENCES, "--beam", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == want
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(s + "\n" for s in SENTENCES)))
    assert main(["translate", str(run), "--beam", "2", "--ensemble", str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == want  # a run pooled with itself
    greedy = loaded.task.translate(loaded.model, SENTENCES, beam=1, max_len_b=2)
    assert main(["translate", str(run), *SENTENCES, "--beam", "1", "--max-len-b", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == greedy


def test_coverage_penalty_reaches_the_runs_beta(trained_run, capsys, monkeypatch):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    seen = []
    from seqlab.tasks import copy_translation

    real = copy_translation.CopyTranslationTask.translate

    def spy(self, model, sentences, beam=4, **search):
        seen.append(self.cfg.coverage_penalty)
        return real(self, model, sentences, beam, **search)

    monkeypatch.setattr(copy_translation.CopyTranslationTask, "translate", spy)
    assert main(["translate", str(run), SENTENCES[0], "--coverage-penalty", "0.3"]) == 0
    assert main(["translate", str(run), SENTENCES[0]]) == 0
    assert seen == [0.3, 0.0]
    capsys.readouterr()


@pytest.mark.parametrize("flag", [["--json"], ["--plot", "x"], ["--nbest", "2"], ["--compile"]])
def test_per_hypothesis_flags_are_refused(trained_run, capsys, flag):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    assert main(["translate", str(run), SENTENCES[0], *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag[0]}:" in err[0] and f"drop {flag[0]}" in err[0]
