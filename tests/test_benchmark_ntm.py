"""benchmarks/ntm.py builds one section across separate invocations."""

from __future__ import annotations

import argparse

from benchmarks.ntm import HEADING, Row, earlier_parts, render_section


def _row(problem: str, seed: int = 0) -> Row:
    valid = {"bit_errors": 0.0, "bit_errors_max": 0.0, "cost_bits": 0.5}
    return Row(problem, "ntm", seed, 65_100, 20.0, 1000, 900, valid, {"bit_errors@30": 1.5})


def test_a_second_invocation_keeps_the_tables_and_figures_of_problems_not_rerun(tmp_path):
    out = tmp_path / "results.md"
    args = argparse.Namespace(minutes=20.0)
    first = _row("copy")
    first.figures = [str(tmp_path / "figures" / "ntm-copy.png")]
    section = render_section([first, _row("copy", 1)], "python benchmarks/ntm.py A", args, out)
    out.write_text(f"# Results\n\n{section}\n\n## Next\n\nother text\n", encoding="utf-8")

    earlier = earlier_parts(out, ["recall"])
    second = _row("recall")
    second.figures = [str(tmp_path / "figures" / "ntm-recall.png")]
    merged = render_section(
        [second], "python benchmarks/ntm.py B", argparse.Namespace(minutes=7.0), out, earlier
    )
    lines = merged.splitlines()
    assert lines[0] == HEADING
    assert "Command: `python benchmarks/ntm.py A`" in lines
    assert "Command: `python benchmarks/ntm.py B`" in lines
    assert lines.index("### copy") < lines.index("### recall")
    copy_rows = [x for x in lines if x.startswith("| copy |")]
    assert len(copy_rows) == 2 and sum(x.startswith("| recall |") for x in lines) == 1
    assert "![NTM copy memory trace](figures/ntm-copy.png)" in lines
    assert "![NTM recall memory trace](figures/ntm-recall.png)" in lines
    assert "2 of 2 seeds" in merged  # copy's verdict survives a run without copy
    assert "other text" not in merged  # the next section is not swallowed

    rerun = earlier_parts(out, ["copy"])  # rerunning copy drops its old table and verdict
    assert not rerun["tables"] and not rerun["verdict"] and not rerun["runs"]


PROBLEMS = ("copy", "repeat_copy", "recall", "priority_sort")


def test_every_problem_has_an_lstm_baseline_on_the_same_data_and_budget():
    import yaml

    from benchmarks.ntm import preset_path

    for problem in PROBLEMS:
        ntm = yaml.safe_load(preset_path(problem, "ntm").read_text(encoding="utf-8"))
        lstm = yaml.safe_load(preset_path(problem, "lstm").read_text(encoding="utf-8"))
        assert lstm["task"] == ntm["task"], problem  # same data, lengths and test lengths
        assert lstm["model"]["name"] == "lstm_seq_baseline" and ntm["model"]["name"] == "ntm"
        for key in ("optim", "max_minutes", "clip_norm", "precision", "early_stop_metric"):
            assert lstm["train"][key] == ntm["train"][key], (problem, key)
