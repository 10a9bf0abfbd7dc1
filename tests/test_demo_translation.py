"""The translation demo end to end on the shipped Multi30k, shrunk to seconds: it trains,
scores test2016 with sacreBLEU, prints five translations and writes the heatmap."""

from seqlab.demo_translation import run_translation_demo

TINY = [
    "task.max_train_examples=400",
    "task.vocab_size=300",
    "task.test_beam=2",
    "task.max_len_b=3",
    "task.max_len_a=0.5",
    "model.d_model=16",
    "model.n_heads=2",
    "model.d_ff=32",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "train.threads=1",
    "train.progress=false",
]


def test_translation_demo_runs_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SEQLAB_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "demo"
    assert run_translation_demo(0.02, 0, str(run_dir), TINY) == 0
    out = capsys.readouterr().out
    assert "test2016 (1,000 sentences, beam 2)" in out
    assert "bleu_lc" in out and "nrefs:1|case:lc" in out
    assert out.count("  ref: ") == 5
    png = (run_dir / "attention.png").read_bytes()
    assert png[:4] == b"\x89PNG"
