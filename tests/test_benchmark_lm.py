"""benchmarks/lm.py builds one table across separate invocations (rows, samples, fits)."""

from __future__ import annotations

from benchmarks.lm import HEADING, Row, earlier_parts, render_section


def _row(preset: str, level: str, fitted: int | None) -> Row:
    valid = {"loss": 1.6, "nats_per_char": 1.6, "bpc": 2.3} if level == "char" else {"ppl": 92.0}
    test = None if level == "char" else {"ppl": 89.0}
    return Row(preset, "m", level, 1000, 45.0, 100, 1.0, 2000.0, valid, test, "best (step 9)",
               f"sample of {preset}", fitted_steps=fitted)  # fmt: skip


def test_a_second_invocation_keeps_rows_samples_and_fitted_T_of_presets_not_rerun(tmp_path):
    out = tmp_path / "results.md"
    first = render_section([_row("shakespeare-char-transformer", "char", 2698)], "cmd A")
    out.write_text(f"# Results\n\n{first}\n\n## Next\n\nother\n", encoding="utf-8")
    merged = render_section(
        [_row("ptb-lstm", "word", None)], "cmd B", earlier_parts(out, ["ptb-lstm"])
    )
    lines = merged.splitlines()
    assert lines[0] == HEADING and "Command: `cmd A`" in lines and "Command: `cmd B`" in lines
    assert sum(x.startswith("| `shakespeare-char-transformer`") for x in lines) == 1
    assert sum(x.startswith("| `ptb-lstm`") for x in lines) == 1
    assert "sample of shakespeare-char-transformer" in merged and "sample of ptb-lstm" in merged
    assert "(the last refitted T): `shakespeare-char-transformer` 2698." in merged
    assert "other" not in merged
    again = earlier_parts(out, ["shakespeare-char-transformer"])  # rerun: old row and T go
    assert not again["rows"] and not again["fitted"]
