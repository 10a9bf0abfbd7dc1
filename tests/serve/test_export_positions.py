"""An exported model's position tables are constants of the export (the eager sinusoidal
table grows instead): ``export.json`` records how many source and target positions they
hold, and decoding past them through the export is a clear SeqlabError naming the table
and what to do, not ONNX Runtime's index error or a silently clamped slice; within them
the export decodes what the model decodes."""

import json

import pytest
import torch

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.greedy import greedy
from seqlab.errors import SeqlabError
from seqlab.models.convs2s import ConvS2S, ConvS2SConfig
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq
from seqlab.serve.export import export_model, greedy_exported, load_exported, position_tables

V, POSITIONS = 20, 6


@pytest.fixture(scope="module")
def convs2s_export(tmp_path_factory):
    torch.manual_seed(0)
    cfg = ConvS2SConfig(
        emb_dim=8, channels=8, encoder_layers=1, decoder_layers=1, max_positions=POSITIONS
    )
    model = ConvS2S(cfg, src_vocab=V, tgt_vocab=V, pad_id=PAD_ID).eval()
    out = tmp_path_factory.mktemp("convs2s") / "export"
    export_model(model, "convs2s", out, "torchscript")
    return model, out


def test_export_json_records_the_tables(convs2s_export):
    _, out = convs2s_export
    meta = json.loads((out / "export.json").read_text(encoding="utf-8"))
    assert meta["positions"] == {"source": POSITIONS, "target": POSITIONS}
    model = TransformerSeq2Seq(
        TransformerConfig(d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1),
        src_vocab=V,
        tgt_vocab=V,
        pad_id=PAD_ID,
    )
    n = model.pos.PE.size(0)
    assert position_tables(model, "transformer") == {"source": n, "target": n}
    assert position_tables(torch.nn.GRU(2, 2), "luong") is None


def test_decoding_past_the_tables_is_a_clear_error(convs2s_export):
    model, out = convs2s_export
    encoder, step = load_exported(out)
    src = torch.tensor([[5, 6, 7, EOS_ID]])  # (1, 4)
    mask = src != PAD_ID
    tokens, _ = greedy_exported(encoder, step, src, mask, max_len=POSITIONS)  # fits
    with torch.no_grad():
        want = greedy(model, model.init_state(model.encode(src, mask), mask), 1, BOS_ID,
                      EOS_ID, POSITIONS)  # fmt: skip
    assert tokens.tolist() == want.tokens.tolist()
    with pytest.raises(SeqlabError, match=r"6 target positions.*needs 7.*--max-len-b"):
        greedy_exported(encoder, step, src, mask, max_len=POSITIONS + 1)
    long_src = torch.tensor([[5] * POSITIONS + [EOS_ID]])  # (1, 7)
    with pytest.raises(SeqlabError, match=r"6 source positions.*needs 7.*shorter sources"):
        greedy_exported(encoder, step, long_src, long_src != PAD_ID, max_len=2)
