"""benchmarks/lm.py builds one table across separate invocations (rows, samples, fits)."""

from __future__ import annotations

import pytest
import torch
import yaml

from benchmarks.lm import (
    HEADING,
    Row,
    earlier_parts,
    load_preset,
    presets_of_command,
    render_section,
    resumable,
)
from seqlab import api
from seqlab.run_config import resolve_run
from seqlab.train.muon import MuonAdamW
from seqlab.train.optim import build_optimizer
from tests.train.tiny import tiny


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


def test_the_command_of_a_rerun_preset_goes_with_its_row(tmp_path):
    """A Command line (and its Machine line) whose presets are all run again is dropped;
    one that also ran a kept preset stays."""
    out = tmp_path / "results.md"
    a = "python benchmarks/lm.py --presets shakespeare-char-transformer --minutes 45"
    b = "python benchmarks/lm.py --presets ptb-lstm,ptb-gru --minutes 60"
    out.write_text(render_section([_row("shakespeare-char-transformer", "char", 9)], a) + "\n")
    rows = [_row("ptb-lstm", "word", None), _row("ptb-gru", "word", None)]
    out.write_text(render_section(rows, b, earlier_parts(out, ["ptb-lstm", "ptb-gru"])) + "\n")
    assert presets_of_command(f"Command: `{b}`") == ["ptb-lstm", "ptb-gru"]
    everything = presets_of_command("Command: `python benchmarks/lm.py --minutes 3`")
    assert everything[0] == "shakespeare-char-transformer" and "ptb-lstm" in everything
    again = earlier_parts(out, ["shakespeare-char-transformer"])
    assert again["runs"][0] == f"Command: `{b}`" and len(again["runs"]) == 2
    assert again["runs"][1].startswith("Machine: ")
    partly = earlier_parts(out, ["ptb-lstm"])  # ptb-gru's row stays, so does command b
    assert f"Command: `{b}`" in partly["runs"] and f"Command: `{a}`" in partly["runs"]


def test_resume_takes_only_a_checkpointed_run_of_the_same_config(tmp_path):
    """--resume: a folder without a step checkpoint trains afresh (False), one of the same
    preset and overrides resumes (True), one whose config differs is refused by name."""
    preset, texts = tiny(), ["train.max_steps=10", "train.seed=3"]
    run_dir = tmp_path / "bench-tiny"
    assert resumable(run_dir, preset, texts) is False
    api.train(preset, run_dir=run_dir, overrides=texts, quiet=True)
    assert resumable(run_dir, preset, texts) is True
    with pytest.raises(SystemExit, match=r"train\.seed is 3 there but 4 in this command"):
        resumable(run_dir, preset, ["train.max_steps=10", "train.seed=4"])
    with pytest.raises(SystemExit, match=r"model\.d_model is 16 there but 32"):
        resumable(run_dir, preset, [*texts, "model.d_model=32"])
    with pytest.raises(SystemExit, match=r"train\.optim\.lr is 0\.003 there but 0\.01"):
        resumable(run_dir, preset, [*texts, "train.optim.lr=0.01"])  # a nested field
    # A run saved before a field existed (here optim.muon_momentum, added later): the
    # missing field is its default, not a difference.
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())
    del stored["train"]["optim"]["muon_momentum"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(stored))
    assert resumable(run_dir, preset, texts) is True
    with pytest.raises(SystemExit, match=r"muon_momentum is 0\.95 there but 0\.9"):
        resumable(run_dir, preset, [*texts, "train.optim.muon_momentum=0.9"])


def test_the_nanogpt_preset_is_nanogpts_cpu_model_trained_with_muon():
    """The 3-minute preset: nanoGPT's CPU model (4 × 128, context 64, dropout 0) with
    batches of 32 × 64, Muon at 8e-3 and validation only at the end (docs/lm.md §4); it
    resolves, and its optimizer is the Muon + AdamW pair."""
    data = load_preset("shakespeare-char-nanogpt")
    m, t = data["model"], data["train"]
    assert (m["layers"], m["d_model"], m["context"], m["dropout"]) == (4, 128, 64, 0.0)
    assert (data["task"]["batch_size"], data["task"]["bptt"]) == (32, 64)
    assert (t["optim"]["name"], t["optim"]["lr"], t["valid_every"]) == ("muon", 8e-3, 100000)
    run = resolve_run(data, [])
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 4))
    assert isinstance(build_optimizer(model, run.train.optim), MuonAdamW)


def test_the_shipped_derived_presets_are_their_base_with_the_stated_changes():
    """configs/shakespeare-nanogpt.yaml and configs/ptb-pointer-baseline.yaml are
    shipped so that ``seqlab train`` runs them directly; each must stay its base preset
    with only the changes ``DERIVED`` states (the benchmark's like-for-like comparison)."""
    from benchmarks.lm import DERIVED, ROOT, SHIPPED_AS
    from seqlab.config import load_yaml

    assert set(SHIPPED_AS) == set(DERIVED)
    for name in DERIVED:
        shipped = load_yaml(ROOT / "configs" / f"{SHIPPED_AS[name]}.yaml")
        assert shipped == load_preset(name), name
        assert resolve_run(shipped, []).to_dict() == resolve_run(load_preset(name), []).to_dict()
