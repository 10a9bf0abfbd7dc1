"""``seqlab export`` for the RNN encoder–decoders (Luong, Bahdanau, Sutskever, Cho) and
ConvS2S, both formats: the exported encoder gives the eager initial state, and the exported step the
eager logits and state at every step, at another batch size and source length than it
was traced with; the reference greedy loop and seqlab's beam search over the exported
step give the eager translations, scores and log P; beam 1 over the export equals its
greedy loop; a GRU without a fused kernel is refused; of what C++ writes to stderr during
an export only the exporter's notes on packed sequences are held back; an export leaves
the model in the mode it came in and traces it without dropout."""

from __future__ import annotations

import json
import os

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.errors import SeqlabError
from seqlab.models.cho import Cho, ChoConfig
from seqlab.models.luong import Luong, LuongConfig
from seqlab.serve.export import (
    beam_exported,
    export,
    export_model,
    greedy_exported,
    load_exported,
)
from seqlab.serve.export_codec import codec_of
from seqlab.serve.export_rnn import _without_packed_shape_notes
from tests.serve import runs
from tests.serve.test_api import SENTENCES
from tests.serve.test_export import _batch, _limits, check_greedy_equals_eager

FAMILIES = list(runs.RNN_MODELS)


@pytest.fixture(scope="module", params=FAMILIES)
def rnn_model(request, tmp_path_factory):
    before = torch.get_num_threads()
    try:
        run = runs.rnn_translation_run(tmp_path_factory.mktemp(request.param), request.param)
    finally:
        torch.set_num_threads(before)  # the trainer sets train.threads
    return api.load(run)


@pytest.fixture(scope="module", params=["torchscript", "onnx"])
def exported(request, rnn_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"{rnn_model.config.model}-{request.param}")
    export(rnn_model, folder, fmt=request.param)
    return load_exported(folder)


def _state(model, src, src_mask):
    with torch.no_grad():
        return model.init_state(model.encode(src, src_mask), src_mask)


def test_exported_encoder_and_step_equal_eager(rnn_model, exported):
    encoder, step = exported
    model, task = rnn_model.model, rnn_model.task
    meta = step.meta["state"]
    names = [f["name"] for f in meta["fields"]]
    static = {f["name"] for f in meta["fields"] if f["static"]}
    _, src, src_mask = _batch(task, SENTENCES)  # B = 4, S ≠ 5: traced with B = 2, S = 5
    assert src.shape[0] == 4 and src.shape[1] != 5 and not bool(src_mask.all())
    state = _state(model, src, src_mask)
    codec = codec_of(model, rnn_model.config.model)  # the state as named tensors
    fields = dict(zip(names, encoder(src, src_mask)))
    assert set(fields) == set(codec.fields(state)) - {"src_mask"}
    for n, t in fields.items():
        torch.testing.assert_close(t, codec.fields(state)[n], rtol=1e-5, atol=1e-5, msg=n)
    assert meta["given"] == (["src_mask"] if "src_mask" in vars(state) else [])
    if rnn_model.config.model == "convs2s":  # the position, as the width of "steps"
        assert fields["steps"].shape == (4, 0) and state.position == 0
    mask = (src_mask,) * len(meta["given"])
    y = torch.full((4,), BOS_ID, dtype=torch.long)
    for _ in range(5):
        with torch.no_grad():
            want, state = model.step(y, state)
        got, *changed = step(y, *mask, *(fields[n] for n in names))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        dynamic = [n for n in names if n not in static]
        assert len(changed) == len(dynamic) > 0
        for n, t in zip(dynamic, changed):
            torch.testing.assert_close(t, codec.fields(state)[n], rtol=1e-4, atol=1e-4, msg=n)
            fields[n] = t
        y = want.argmax(-1)


def test_reference_greedy_loop_equals_eager_greedy(rnn_model, exported):
    check_greedy_equals_eager(rnn_model, exported)


def test_reference_beam_loop_equals_eager_beam_search(rnn_model, exported):
    model, task = rnn_model.model, rnn_model.task
    ids, src, src_mask = _batch(task, SENTENCES)
    limit = _limits(ids)  # (B,)
    settings = {"beam_size": 3, "n_best": 2, "alpha": 0.6}
    want = beam_search(
        model, _state(model, src, src_mask), len(ids), BOS_ID, EOS_ID, limit, pad_id=PAD_ID,
        **settings,
    )  # fmt: skip
    got = beam_exported(*exported, src, src_mask, limit, **settings)
    assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.lengths, want.lengths)
    torch.testing.assert_close(got.scores, want.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.log_probs, want.log_probs, rtol=0, atol=1e-5)
    one = beam_exported(*exported, src, src_mask, int(limit.max()), beam_size=1)
    tokens, log_p = greedy_exported(*exported, src, src_mask, int(limit.max()))
    assert torch.equal(one.tokens[:, 0], tokens)
    torch.testing.assert_close(one.log_probs[:, 0], log_p, rtol=0, atol=1e-5)


def test_cli_export_writes_json_naming_the_state(rnn_model, tmp_path, capsys):
    assert main(["export", str(rnn_model.checkpoint), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"wrote {tmp_path / n}" for n in ("encoder.pt", "step.pt", "export.json")]
    meta = json.loads((tmp_path / "export.json").read_text())
    assert meta["model"] == rnn_model.config.model and meta["state"]["layout"] == "fields"
    fields = {f["name"]: f for f in meta["state"]["fields"]}
    assert "src_mask" not in fields
    assert meta["encoder"]["outputs"] == list(fields)
    dynamic = [n for n, f in fields.items() if not f["static"]]
    assert meta["step"]["outputs"] == ["logits", *(f"{n}_out" for n in dynamic)]
    expected = {  # what each family's state holds (seqlab/models/<family>.py)
        "luong": ({"h_bar", "keys_pre"}, {"h_bar", "keys_pre", "alpha", "cov"}),
        "bahdanau": ({"h", "U_a_h"}, {"h", "U_a_h", "alpha", "cov"}),
        "sutskever": (set(), set()),
        "cho": ({"c"}, set()),
        "convs2s": ({"z", "z_plus_e"}, {"z", "z_plus_e"}),
    }[rnn_model.config.model]
    assert {n for n, f in fields.items() if f["static"]} == expected[0]
    assert {n for n, f in fields.items() if f["source_axis"]} == expected[1]


def test_a_gru_without_fused_kernel_is_refused(tmp_path):
    # Cho's paper GRU (reset before the recurrent matmul) runs the encoder as a Python loop
    # over time, which a trace would fix to one source length
    cfg = ChoConfig(emb_dim=8, hidden_size=8, readout_dim=4, reset_after=False, dropout=0.0)
    with pytest.raises(SeqlabError, match="reset_after=False.*model.reset_after=true"):
        export_model(Cho(cfg, 30, 40), "cho", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_only_the_exporters_packed_sequence_notes_are_held_back(capfd):
    note = "[W] Warning: The shape inference of prim::PadPacked type is missing, so it …\n"
    with _without_packed_shape_notes():
        os.write(2, note.encode())
        os.write(2, b"a real error from C++\n")
        os.write(2, note.replace("PadPacked", "PackPadded").encode())
    assert capfd.readouterr().err == "a real error from C++\n"


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("training", [False, True])
def test_export_leaves_the_model_in_its_mode(fmt, training, tmp_path):
    # torch.onnx's TorchScript-based exporter restores the mode of the module it is
    # given; given a fresh wrapper (training mode) it switched the model's dropout on
    torch.manual_seed(0)
    cfg = LuongConfig(emb_dim=8, hidden_size=8, layers=2, dropout=0.3)
    model = Luong(cfg, 30, 40).train(training)
    export_model(model, "luong", tmp_path / fmt, fmt)
    assert [m.training for m in model.modules()] == [training] * len(list(model.modules()))
    encoder, step = load_exported(tmp_path / fmt)
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]])
    fields = encoder(src, src != PAD_ID)
    model.eval()
    state = _state(model, src, src != PAD_ID)
    for name, t in zip(step.meta["encoder"]["outputs"], fields):  # traced without dropout
        torch.testing.assert_close(t, getattr(state, name), rtol=1e-5, atol=1e-6)


def test_a_failed_export_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    import seqlab.serve.export as export_module

    torch.manual_seed(0)
    model = Luong(LuongConfig(emb_dim=8, hidden_size=8, layers=1, dropout=0.0), 30, 40)
    out = tmp_path / "out"
    first = export_model(model, "luong", out)
    before = {p.name: p.read_bytes() for p in first}

    def fail_midway(model, name, layout, fmt, paths):
        paths[0].write_bytes(b"half an export")
        raise RuntimeError("the exporter failed")

    monkeypatch.setattr(export_module, "write_fields", fail_midway)
    with pytest.raises(RuntimeError, match="the exporter failed"):
        export_model(model, "luong", out, "onnx")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old export, whole
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no scratch folder left
