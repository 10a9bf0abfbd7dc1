"""benchmarks/pg_decode_sweep.py: one decode-time setting swept on trained runs, valid and
test; each cell equals a separate scoring of that setting, the table's means are the
runs' means, the runs' configs stay as they were, and bad grids are refused."""

import pytest

from benchmarks import pg_decode_sweep as sweep
from benchmarks import pointer_generator as bench
from seqlab import api
from tests.test_benchmark_pointer_generator_reuse import trained_run  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sweep_scores_each_value_as_a_separate_scoring(trained_run, tmp_path):  # noqa: F811
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    out = tmp_path / "sweep.md"
    argv = [str(run), str(run), "--grid", "task.coverage_penalty=0,5", "--out", str(out),
            "--set", "task.coverage_penalty_words=oov", "task.unk_to_copy=true"]  # fmt: skip
    text = sweep.main(argv)
    assert out.read_text() == text
    assert "python benchmarks/pg_decode_sweep.py " in text and "task.coverage_penalty" in text
    rows = [line for line in text.splitlines() if line.startswith("| valid") or "| test" in line]
    assert len(rows) == 4  # 2 splits x 2 values
    # the cell of test, beta 5 equals one scoring of the run with those settings
    alone = api.load(run)
    bench.apply_evaluation_overrides(
        alone,
        ["task.valid_beam=2", "task.valid_bleu_sentences=0", "task.coverage_penalty_words=oov",
         "task.unk_to_copy=true", "task.coverage_penalty=5"],
    )  # fmt: skip
    m = alone.evaluate("test")
    copies = round(m["oov_copy"] * m["oov_copyable"] / 100.0)
    (row,) = [r for r in rows if r.startswith("| test | 5 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"{m['bleu_lc']:.2f}" and cells[3] == f"{copies} / {m['oov_copyable']:.0f}"
    assert cells[-3] == f"{m['bleu_lc']:.2f}"  # the same run twice: the mean is the run
    assert api.load(run).config.task_cfg.coverage_penalty == 0.0  # the run is untouched


@pytest.mark.parametrize(
    "grid", ["task.coverage_penalty", "task.coverage_penalty=", "model.dropout=0,1"]
)
def test_sweep_refuses_a_grid_that_is_not_a_decode_setting(grid, tmp_path):
    with pytest.raises(SystemExit):
        sweep.main([str(tmp_path), "--grid", grid])


def test_sweep_refuses_a_held_setting_that_is_not_a_decode_setting(tmp_path):
    with pytest.raises(SystemExit, match="--set model.dropout=0.1: not a decode-time setting"):
        sweep.main(
            [str(tmp_path), "--grid", "task.coverage_penalty=0", "--set", "model.dropout=0.1"]
        )


def test_ensemble_of_a_run_with_itself_scores_as_the_run(trained_run, tmp_path):  # noqa: F811
    """--ensemble decodes the runs as one pool; a run pooled with itself is the run (its
    distribution is the mean of two equal ones), so the table has one column equal to the
    run scored alone."""
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    argv = [str(run), str(run), "--ensemble", "--grid", "task.unk_to_copy=true",
            "--splits", "test"]  # fmt: skip
    text = sweep.main(argv)
    assert "Run 0 = the ensemble of " in text
    (row,) = [line for line in text.splitlines() if line.startswith("| test")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 2 + 3 + 3  # split, value, one run's 3 cells, the 3 means
    alone = api.load(run)
    bench.apply_evaluation_overrides(alone, ["task.valid_beam=2", "task.unk_to_copy=true"])
    m = alone.evaluate("test")
    copies = round(m["oov_copy"] * m["oov_copyable"] / 100.0)
    assert cells[2] == f"{m['bleu_lc']:.2f}" and cells[3] == f"{copies} / {m['oov_copyable']:.0f}"


def test_a_grid_over_the_test_beam_decodes_valid_with_each_beam(
    trained_run,  # noqa: F811
    monkeypatch,
):
    """Valid is decoded with the test beam; when the grid is the test beam itself, each
    value's (it was the saved test beam for every value: the valid cells were all beam 4's)."""
    run = trained_run / f"bench-{bench.PRESETS['plain']}"
    beams, score = [], sweep.score

    def recording(loaded, overrides, split):
        m = score(loaded, overrides, split)
        cfg = loaded.task.cfg
        beams.append((split, cfg.valid_beam if split == "valid" else cfg.test_beam))
        return m

    monkeypatch.setattr(sweep, "score", recording)
    sweep.main([str(run), "--grid", "task.test_beam=1,3", "--splits", "valid,test"])
    assert beams == [("valid", 1), ("test", 1), ("valid", 3), ("test", 3)]
    beams.clear()  # a held --set task.test_beam moves valid too; other grids keep it
    sweep.main([str(run), "--grid", "task.unk_to_copy=true", "--set", "task.test_beam=3",
                "--splits", "valid"])  # fmt: skip
    assert beams == [("valid", 3)]
