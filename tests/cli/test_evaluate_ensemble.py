"""``seqlab evaluate RUN --ensemble RUN …``: the runs decoded as one model (the linear pool
of their distributions, seqlab.models.pointer_generator_ensemble). A pointer-generator run
pooled with itself scores as the run alone; a run of another task is refused in one line
naming it; a Transformer run pooled with itself scores as the run too."""

import json

import pytest
import torch

from benchmarks import pointer_generator as bench
from seqlab.cli.main import main
from tests.test_benchmark_pointer_generator_reuse import trained_run  # noqa: F401  (fixture)
from tests.train.tiny import tiny, write_preset


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_a_run_pooled_with_itself_scores_as_the_run(trained_run, capsys):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(run), "--ensemble", str(run), "--split", "test"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("ensemble of ") and out[0].count("checkpoints") == 2
    pooled = json.loads(out[-1])
    assert pooled["ensemble"] == [alone["checkpoint"]] * 2
    for key in ("bleu_lc", "chrf", "oov_copy", "repeat_trigram"):
        assert pooled[key] == pytest.approx(alone[key], abs=1e-9), key
    assert pooled["loss"] == pytest.approx(alone["loss"], abs=1e-5)  # the pooled NLL


def test_runs_of_other_tasks_are_refused_and_transformers_pool(trained_run, tmp_path, capsys):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    other = tmp_path / "algorithmic"
    preset = write_preset(tmp_path / "tiny.yaml", tiny(**{"train.max_steps": 2}))
    assert main(["train", str(preset), "--run-dir", str(other)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--ensemble", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{other}: its task is AlgorithmicTask" in err[0]
    # a Transformer run (here the algorithmic task's) pools too, and with itself is itself
    assert main(["evaluate", str(other), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(other), "--ensemble", str(other), "--json"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    assert pooled["exact_match"] == alone["exact_match"]
    assert pooled["loss"] == pytest.approx(alone["loss"], abs=1e-5)


def test_ensemble_refuses_compile(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path), "--ensemble", str(tmp_path), "--compile"]) == 2
    assert "drop --compile" in capsys.readouterr().err
