"""``seqlab check RUN --exported DIR`` (seqlab.eval.export_invariants): the run against the
files ``seqlab export`` wrote, teacher forced and through beam search. The run's own
export passes (Transformer and Luong, both formats); an export of other weights fails
both checks and the command exits 1; a pointer-generator's files pass too (its log p
compared where p ≥ 1e-4: float32 mixture rounding); the exported RNN state serves GNMT's coverage
penalty as the eager state does; what the option cannot do is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.data.vocab import EOS_ID
from seqlab.eval.export_invariants import run_export_checks
from seqlab.serve.export import export
from seqlab.serve.exported_model import use_exported
from seqlab.tasks.translation_eval import SearchSettings
from tests.serve import runs
from tests.serve.test_api import SENTENCES

NAMES = ["eager == exported (forward)", "eager == exported (beam 3)"]


def _check(run, folder, capsys, *flags):
    code = main(["check", str(run), "--sentences", "6", "--beam", "3", "--dtype", "float32",
                 "--exported", str(folder), "--json", *flags])  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def convs2s_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("convs2s")
    return runs.keeping_threads(runs.rnn_translation_run, root, "convs2s")


@pytest.mark.parametrize(
    ("which", "fmt"),
    [("transformer", "onnx"), ("transformer", "torchscript"), ("luong", "onnx"),
     ("convs2s", "torchscript"), ("pointer_generator", "onnx"),
     ("pointer_generator", "torchscript")],
)  # fmt: skip
def test_the_run_s_own_export_passes(
    which, fmt, translation_dir, luong_dir, convs2s_dir, pointer_generator_dir, tmp_path, capsys
):
    run = {"transformer": translation_dir, "luong": luong_dir, "convs2s": convs2s_dir,
           "pointer_generator": pointer_generator_dir}[which]  # fmt: skip
    assert main(["export", str(run), "--format", fmt, "--out", str(tmp_path / "x")]) == 0
    capsys.readouterr()
    code, out = _check(run, tmp_path / "x", capsys)
    assert code == 0 and out["passed"]
    checks = {c["name"]: c for c in out["checks"]}
    assert list(checks)[-2:] == NAMES  # after the five checks of the checkpoint itself
    # ONNX pointer-generator: float32 rounding of P in probability space, ~4e-4 (the doc)
    close = 1e-3 if (which, fmt) == ("pointer_generator", "onnx") else 1e-4
    for name in NAMES:
        assert checks[name]["passed"] and checks[name]["max_diff"] < close  # tol 1e-3
    if which == "pointer_generator":  # its log p compared where p ≥ 1e-4 only
        assert "where p ≥ 0.0001" in checks[NAMES[0]]["compared"]
    step = api.load(run).step
    assert out["exported"] == {"folder": str(tmp_path / "x"), "format": fmt, "step": step}
    assert json.loads((tmp_path / "x" / "export.json").read_text())["checkpoint"]["step"] == step


def test_an_export_of_other_weights_fails(translation_dir, tmp_path, capsys):
    other = api.load(translation_dir)
    with torch.no_grad():  # what an export of another checkpoint of the run looks like
        for p in other.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    export(other, tmp_path / "stale")
    code, out = _check(translation_dir, tmp_path / "stale", capsys)
    assert code == 1 and not out["passed"]
    checks = {c["name"]: c for c in out["checks"]}
    assert all(c["passed"] for n, c in checks.items() if n not in NAMES)
    assert checks[NAMES[0]]["max_diff"] > 1e-2 and not checks[NAMES[0]]["passed"]
    assert not checks[NAMES[1]]["passed"]
    assert main(["check", str(translation_dir), "--sentences", "2",
                 "--exported", str(tmp_path / "stale")]) == 1  # fmt: skip
    table = capsys.readouterr().out
    assert "FAILED" in table and "exported torchscript files in" in table


def test_the_exported_rnn_state_serves_the_coverage_penalty(luong_dir, tmp_path, capsys):
    loaded = api.load(luong_dir)
    export(loaded, tmp_path / "x", fmt="onnx")
    via = use_exported(loaded, tmp_path / "x").model
    assert via.attention_coverage is not None
    settings = SearchSettings(beam=3, length_penalty=0.6, coverage_penalty=0.5)
    sources = [loaded.task.src_tok.encode(s) + [EOS_ID] for s in SENTENCES]
    checks = run_export_checks(loaded.model, via, sources, settings)
    assert "over V at" in checks[0].compared  # logits: every column compared
    assert [c.name for c in checks] == NAMES and all(c.passed for c in checks), checks
    flags = ["--beam", "3", "--coverage-penalty", "0.5"]
    assert main(["translate", str(luong_dir), *flags, *SENTENCES]) == 0
    want = capsys.readouterr().out
    exported = ["--exported", str(tmp_path / "x")]
    assert main(["translate", str(luong_dir), *flags, *exported, *SENTENCES]) == 0
    assert capsys.readouterr().out == want


def test_what_check_exported_cannot_do_is_refused(
    translation_dir, lm_dir, translation_model, tmp_path, capsys
):
    export(translation_model, tmp_path / "x")
    for args in (
        [str(lm_dir), "--exported", str(tmp_path / "x")],
        [str(translation_dir), "--exported", str(tmp_path / "x"), "--device", "cuda"],
        [str(translation_dir), "--exported", str(tmp_path / "none")],
    ):
        assert main(["check", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
    assert "no export.json there" in err[0]
    # a Transformer keeps no attention coverage: one line, not a traceback
    assert main(["translate", str(translation_dir), "--coverage-penalty", "0.5", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "set the coverage penalty to 0" in err[0]
    # and the Transformer's exported files keep none either
    assert not hasattr(use_exported(translation_model, tmp_path / "x").model,
                       "attention_coverage")  # fmt: skip


def test_a_nan_below_the_floor_is_not_hidden(translation_model):
    """The pointer-generator's floor (compare log p only where p ≥ 1e-4) masks rounding,
    not a NaN: a NaN in a column the floor leaves out still fails the check (the
    log-softmax the check takes of each row spreads it to every column)."""
    import copy

    from seqlab.eval.export_invariants import check_exported_forward
    from seqlab.eval.invariants import Sources

    class Floored(Sources):
        export_floor = 1e-4

    eager = copy.deepcopy(translation_model.model).float().eval()

    class Poisoned(torch.nn.Module):
        def __init__(self, model, column):
            super().__init__()
            self.model, self.column = model, column

        def forward(self, *args):
            logits = self.model(*args).clone()
            logits[..., self.column] = float("nan")
            return logits

    task = translation_model.task
    sources = Floored([task.src_tok.encode(s) + [EOS_ID] for s in SENTENCES[:2]])
    hyps = [[5, 6, EOS_ID], [7, EOS_ID]]
    with torch.no_grad():
        p = torch.softmax(eager(*_batch(sources, hyps)), -1)
    column = int(p.amax(dim=(0, 1)).argmin())  # a word far below the floor everywhere
    assert float(p[..., column].max()) < 1e-4
    ok = check_exported_forward(eager, eager, sources, hyps, 1e-3)
    assert ok.passed and ok.max_diff == 0.0 and "where p ≥ 0.0001" in ok.compared
    bad = check_exported_forward(eager, Poisoned(eager, column), sources, hyps, 1e-3)
    assert not bad.passed


def _batch(sources, hyps):
    """The padded batch the check builds: (src, src_mask, y_in, tgt_mask)."""
    from seqlab.data.collate import collate_seq2seq
    from seqlab.data.vocab import BOS_ID, PAD_ID
    from seqlab.eval.invariants import _targets

    b = collate_seq2seq(list(zip(sources.items, _targets(hyps))), bos=BOS_ID, eos=EOS_ID,
                        pad=PAD_ID)  # fmt: skip
    return b.src, b.src_mask, b.y_in, b.tgt_mask
