"""benchmarks/decode_int8.py end to end on a tiny workload: fp32 and int8 (and bf16 where
the CPU has it fast) decode the peers' model; the table has a row per search with
positive step times and the 1-best agreement with fp32."""

from benchmarks import decode_int8 as bench


def test_rows_per_search_with_times_and_agreement(capsys, one_thread):  # restores threads
    argv = ["--tiny", "--sentences", "3", "--new-tokens", "4", "--reps", "1", "--threads", "1"]
    rows = bench.main([*argv, "--no-bf16"])
    assert rows[0] == (
        "| search | fp32 ms / step | int8 ms / step | int8 vs fp32 | int8 same 1-best |"
    )
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["greedy", "beam 5"]
    for row in rows[2:]:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert float(cells[1]) > 0 and float(cells[2]) > 0
        assert cells[3].endswith("×") and cells[4].endswith("%")
        assert 0 <= int(cells[4][:-1]) <= 100
    assert "transformer: 3 sentences, 4 new tokens" in capsys.readouterr().out


def test_an_rnn_preset_decodes_and_its_output_layer_runs_in_int8(monkeypatch, one_thread):
    from seqlab.nn import packed_linear as pl

    shapes = []
    real = pl.int8_product
    monkeypatch.setattr(pl, "int8_product", lambda x, w: shapes.append(w.W_hat.shape) or real(x, w))
    argv = ["--tiny", "--sentences", "2", "--new-tokens", "3", "--reps", "1", "--threads", "1"]
    rows = bench.main([*argv, "--no-bf16", "--searches", "1", "--model", "luong"])
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["greedy"]
    assert (50, 256) in shapes  # the tied (V, 256) output layer of the Luong preset
