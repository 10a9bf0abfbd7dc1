"""``--precision`` of decoding (seqlab.decode.precision): what each value enters, what is
refused with a message that says what to use instead, and that ``seqlab translate`` /
``evaluate --src/--ref`` decode in it (int8 through the searches' packed linear layers)."""

# ruff: noqa: F811  (the fixtures imported from the test modules are parameters here)
from __future__ import annotations

import json

import pytest
import torch

from seqlab.decode import precision as dp
from seqlab.nn import int8_linear, packed_linear
from seqlab.train.precision import PrecisionError, cpu_has_fast_bf16, read_cpu_flags
from tests.tasks.test_translation import _one_thread, prepared  # noqa: F401
from tests.tasks.test_translation_search_settings import (  # noqa: F401
    SENTENCES,
    bahdanau,
    checkpoint,
    with_cfg,
)


def test_each_precision_enters_its_context():
    with dp.decoding_context("int8", "cpu"):
        assert int8_linear.int8_requested() and not torch.is_autocast_enabled("cpu")
    assert not int8_linear.int8_requested()
    with dp.decoding_context("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and not int8_linear.int8_requested()
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    with dp.decoding_context("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu") and not int8_linear.int8_requested()
    fast = cpu_has_fast_bf16(read_cpu_flags())
    assert dp.resolve_decode_precision("auto", "cpu") == ("bf16" if fast else "fp32")


def test_refusals_say_what_to_do():
    with pytest.raises(PrecisionError, match="int8 decodes on a CPU only.*use bf16 or fp16"):
        dp.resolve_decode_precision("int8", "cuda")
    with pytest.raises(PrecisionError, match="one of fp32, bf16, fp16, int8, auto, got 'int4'"):
        dp.decoding_context("int4", "cpu")
    with pytest.raises(PrecisionError, match="fp16 is not supported on CPU"):
        dp.decoding_context("fp16", "cpu")
    with pytest.raises(PrecisionError, match="--compile cannot decode in int8.*drop --compile"):
        dp.refuse_compiled_int8("int8", True)
    dp.refuse_compiled_int8("bf16", True)  # no error
    dp.refuse_compiled_int8("int8", False)


def test_cli_translate_and_evaluate_decode_in_int8(
    checkpoint, prepared, bahdanau, tmp_path, capsys, monkeypatch
):
    from seqlab.cli.main import main

    task = with_cfg(prepared, length_penalty=1.0, coverage_penalty=0.5)
    calls = []
    real = packed_linear.int8_product
    monkeypatch.setattr(packed_linear, "int8_product", lambda *a: calls.append(1) or real(*a))
    argv = ["translate", str(checkpoint), "--beam", "3", "--json", "--precision", "int8"]
    assert main([*argv, *SENTENCES]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert calls  # the decoder's linear layers ran in int8
    with int8_linear.int8_decoding():
        want = task.translate(bahdanau, SENTENCES, beam=3, nbest=1, return_attention=True)
    assert [r["hypotheses"][0] for r in records] == [t.text for t in want]
    assert [r["scores"][0] for r in records] == [round(t.hypotheses[0].score, 6) for t in want]

    src, ref = tmp_path / "t.de", tmp_path / "t.en"
    src.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    ref.write_text("the dog runs.\na child and a cat.\ntwo men sit.\n", encoding="utf-8")
    hyp = tmp_path / "h.txt"
    argv = ["evaluate", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "3"]
    n = len(calls)
    assert main([*argv, "--precision", "int8", "--hyp", str(hyp), "--json"]) == 0
    assert len(calls) > n
    assert hyp.read_text(encoding="utf-8").splitlines() == [t.text for t in want]
    assert json.loads(capsys.readouterr().out)["precision"] == "int8"
    assert main([*argv, "--precision", "bf16"]) == 0
    assert "(3 sentences, beam 3, decoded in bf16)" in capsys.readouterr().out
    assert main([*argv, "--precision", "auto", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == dp.resolve_decode_precision(
        "auto", "cpu"
    )


def test_cli_refuses_int8_with_compile_or_a_gpu_before_loading(tmp_path, capsys):
    from seqlab.cli.main import main

    missing = str(tmp_path / "no-such-run")  # never loaded: the refusal comes first
    assert main(["translate", missing, "--precision", "int8", "--compile", "x"]) == 2
    assert "--compile cannot decode in int8" in capsys.readouterr().err
    assert main(["translate", missing, "--precision", "int8", "--device", "cuda", "x"]) == 2
    assert "int8 decodes on a CPU only" in capsys.readouterr().err
    assert main(["evaluate", missing, "--precision", "int8", "--compile"]) == 2
    assert "--compile cannot decode in int8" in capsys.readouterr().err


@pytest.mark.parametrize("beam", [1, 3])
def test_int8_reaches_a_decoder_behind_a_step_wrapper(beam, monkeypatch):
    """The pointer-generator's ``block_unk`` decoding wraps the model's step
    (``UnkBlockedDecoder``); the searches pack the wrapped model, so int8 applies."""
    from seqlab.tasks.copy_translation_decode import UnkBlockedDecoder, decode_copy
    from tests.tasks.test_copy_translation_unk import examples, seeded_model, settings

    model = seeded_model()
    assert packed_linear.module_to_pack(UnkBlockedDecoder(model)) is model
    assert packed_linear.module_to_pack(object()) is None
    calls = []
    real = packed_linear.int8_product
    monkeypatch.setattr(packed_linear, "int8_product", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad(), int8_linear.int8_decoding():
        out = decode_copy(model, examples(), settings(beam), block_unk=True)
    assert calls and len(out) == len(examples())


def test_quantized_nothing_until_a_search_packs_in_int8():
    from tests.nn.test_shared_kv import tiny_transformer

    model = tiny_transformer()
    src = torch.randint(4, 40, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad(), dp.decoding_context("int8", "cpu") as entered:
        assert dp.quantized_nothing("int8", entered)
        model.encode(src, mask)  # a forward without a search: nothing packed
        assert dp.quantized_nothing("int8", entered)
        from seqlab.decode import greedy

        greedy(model, model.init_state(model.encode(src, mask), mask), 2, 1, 2, max_len=4)
        assert not dp.quantized_nothing("int8", entered) and entered.searches == 1
    with dp.decoding_context("bf16", "cpu") as entered:
        assert not dp.quantized_nothing("bf16", entered)
