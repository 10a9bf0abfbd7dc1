"""benchmarks/pointers.py builds one section across separate invocations: the presets not
run now keep their rows, each under the command and machine line of its own run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.pointers import HEADING, Result, merge_earlier, render_section


def _result(preset: str, exact: float, command: str = "", run_on: str = "") -> Result:
    problem = "sort" if preset.startswith("sort") else "hull"
    test = {"exact_n10": exact}
    if problem == "hull":
        test |= {"coverage_n10": 0.99, "valid_n10": 1.0}
    model = "bahdanau" if "baseline" in preset else "pointer_net"
    return Result(preset, model, problem, 1000, 20.0, 500, "best (step 400)", "10", 1000,
                  test, (10,), command, run_on)  # fmt: skip


def _record(path, results, command="python benchmarks/pointers.py --minutes 20"):
    rows = [dataclasses.asdict(r) for r in results]
    path.write_text(json.dumps({"command": command, "results": rows}), encoding="utf-8")


def test_a_rerun_preset_replaces_its_rows_and_the_others_are_kept(tmp_path):
    record = tmp_path / "pointers.json"
    old_on = "Machine: A. Date: 2026-11-23. Budget: 20 min."
    _record(record, [_result(p, 0.5, run_on=old_on) for p in ("sort10", "hull10", "hull-baseline")])
    now = _result("hull10", 0.845, "python benchmarks/pointers.py --presets hull10", "Machine: B.")
    merged = merge_earlier([now], record)
    assert [r.preset for r in merged] == ["sort10", "hull10", "hull-baseline"]  # PRESETS order
    assert merged[1] is now
    # rows of a record older than per-row commands take the record's command
    assert merged[0].command == "python benchmarks/pointers.py --minutes 20"
    section = render_section(merged)
    lines = section.splitlines()
    assert lines[0] == HEADING
    assert section.count("Command: `") == 2
    assert f"{old_on} Rows: `sort10`, `hull-baseline`." in lines
    assert "Machine: B. Rows: `hull10`." in lines
    hull10 = [x for x in lines if x.startswith("| `hull10`")]
    assert len(hull10) == 1 and "84.5%" in hull10[0] and hull10[0].endswith("| yes |")
    assert "- `hull10`: best (step 400)" in lines


def test_no_record_means_only_this_run(tmp_path):
    now = [_result("sort10", 0.99, "cmd", "Machine: B.")]
    assert merge_earlier(now, tmp_path / "missing.json") == now


def test_an_unreadable_record_is_an_error_not_lost_rows(tmp_path):
    record = tmp_path / "pointers.json"
    record.write_text("{not json", encoding="utf-8")
    with pytest.raises(SystemExit, match="cannot read the earlier pointer results"):
        merge_earlier([_result("sort10", 0.99)], record)
    assert record.read_text(encoding="utf-8") == "{not json"  # left as it was
