"""The demo: worked examples agree with the notes; the tiny Transformer trains and its
K/V-cached greedy decoding equals full recomputation."""

import torch

from seqlab.demo import BOS, EOS, PAD, reversal_batch, train_reversal, worked_examples


def test_worked_examples_match_the_notes():
    rows = {name: (ours, notes) for name, ours, notes in worked_examples()}
    assert len(rows) == 7
    for name, (ours, notes) in rows.items():
        if name == "self-attention softmax":
            values = [float(v) for v in ours.split(",")]
            assert abs(values[0] - 0.88) < 0.005 and abs(values[1] - 0.12) < 0.005
        elif notes.endswith("…"):
            assert ours.startswith(notes[:-1]), name
        else:
            assert ours == notes, name


def test_reversal_batch_is_the_reverse_with_bos_eos():
    g = torch.Generator().manual_seed(0)
    src, src_mask, y_in, y_out, y_mask = reversal_batch(8, 5, 2, 6, g)
    for b in range(8):
        n = int(src_mask[b].sum())
        assert torch.equal(y_out[b, :n], src[b, :n].flip(0))
        assert y_out[b, n] == EOS and y_in[b, 0] == BOS
        assert torch.equal(y_in[b, 1 : n + 1], y_out[b, :n])
        assert (src[b, n:] == PAD).all() and (y_out[b, n + 1 :] == PAD).all()
        assert int(y_mask[b].sum()) == n + 1


def test_short_training_run_decodes_with_exact_cache():
    metrics = train_reversal(seconds=2.0, seed=0, log_every=100.0)
    assert metrics["steps"] >= 1
    assert metrics["cache_gap"] < 1e-4
    assert 0.0 <= metrics["token_acc"] <= 1.0
