"""``seqlab translate`` on a pointer-generator (copy_translation) run: text out, one line
per input, equal to the task's own ``translate``; ``--coverage-penalty`` reaches the
search's β; an ensemble translates; ``--json`` gives the task's records (p_gen and copies
per output word) and ``--plot`` the attention heatmap; ``--nbest`` prints the search's n
best; ``--compile`` is refused in one line."""

import io
import json

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


def test_coverage_penalty_reaches_the_search(trained_run, capsys, monkeypatch):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    seen = []
    from seqlab.tasks import copy_translation

    real = copy_translation.decode_copy_detailed

    def spy(*args):
        seen.append(args[6])  # β, as the task hands it to the search
        return real(*args)

    monkeypatch.setattr(copy_translation, "decode_copy_detailed", spy)
    assert main(["translate", str(run), SENTENCES[0], "--coverage-penalty", "0.3"]) == 0
    assert main(["translate", str(run), SENTENCES[0]]) == 0
    assert seen == [0.3, 0.0]  # then the run's own (0)
    capsys.readouterr()


def test_json_and_plot_give_the_tasks_records(trained_run, capsys, tmp_path):  # noqa: F811
    from seqlab.cli.translate_cmd import translation_record

    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    loaded = api.load(run)
    want = loaded.task.translate_detailed(loaded.model, SENTENCES, beam=2, return_attention=True)
    plots = tmp_path / "maps"
    argv = ["translate", str(run), *SENTENCES, "--beam", "2", "--json", "--plot", str(plots)]
    assert main(argv) == 0
    out = capsys.readouterr()
    got = [json.loads(line) for line in out.out.splitlines()]
    assert got == [json.loads(json.dumps(translation_record(t))) for t in want]
    for record in got:
        T, S = len(record["target_pieces"]), len(record["source_pieces"])
        assert len(record["attention"]["cross"]) == T and len(record["attention"]["cross"][0]) == S
        assert len(record["p_gen"]) == len(record["copied"]) == T
    assert sorted(p.name for p in plots.iterdir()) == ["0-cross.png", "1-cross.png"]


def test_nbest_prints_the_searchs_n_best_per_input(trained_run, capsys):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    loaded = api.load(run)
    want = loaded.task.translate_detailed(loaded.model, SENTENCES, beam=3, nbest=2)
    assert main(["translate", str(run), *SENTENCES, "--beam", "3", "--nbest", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{i}\t{h.score:.4f}\t{h.text}" for i, t in enumerate(want) for h in t.hypotheses
    ]
    assert len(lines) == 4 and lines[0].split("\t")[2] == want[0].text


def test_compile_is_refused(trained_run, capsys):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    assert main(["translate", str(run), SENTENCES[0], "--compile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--compile:" in err[0] and "drop --compile" in err[0]
