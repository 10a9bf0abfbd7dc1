"""A Transformer run pooled with itself (``--ensemble``) translates as the run and now
shows an attention map: the pool's "cross" is the members' mean alignment, here the run's
last decoder layer's cross-attention averaged over heads (seqlab.models.ensemble)."""

from __future__ import annotations

import json

import torch

from seqlab.cli.main import main


def test_translate_json_of_a_pool_has_the_mean_alignment(translation_dir, capsys):
    sentence = "der hund läuft."
    assert main(["translate", str(translation_dir), "--json", sentence]) == 0
    alone = json.loads(capsys.readouterr().out)
    run = str(translation_dir)
    assert main(["translate", run, "--ensemble", run, "--json", sentence]) == 0
    pooled = json.loads(capsys.readouterr().out)
    assert pooled["hypotheses"] == alone["hypotheses"]
    cross = torch.tensor(alone["attention"]["cross"])  # (L, H, T, S)
    got = torch.tensor(pooled["attention"]["cross"])  # (T, S)
    T, S = len(alone["target_pieces"]), len(alone["source_pieces"])
    assert got.shape == cross.shape[2:] == (T, S)
    torch.testing.assert_close(got, cross[-1].mean(0), rtol=0, atol=2e-4)  # JSON rounds to 1e-4
    assert set(pooled["attention"]) == {"cross"}
