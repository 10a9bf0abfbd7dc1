"""OpenNMT-py 3.0.4 as a peer of ``benchmarks/peers.py`` (training step only).

OpenNMT-py's last release that installs beside torch 2.13 is 3.0.4 (3.5.x pins
``torch<2.3``; ../shared/docs/PEERS.md §5). It is an optional peer (``pip install -e
'.[bench]'``); without it the benchmark prints a "not installed" row.

The model is built the way ``onmt_train`` builds it — its own option parser and
``onmt.model_builder.build_base_model`` — with the sizes of :class:`peers_models.Size`:

    -encoder_type transformer -decoder_type transformer -position_encoding
    -enc_layers L -dec_layers L -heads h -hidden_size d -word_vec_size d -transformer_ff f
    -dropout p -attention_dropout p -share_embeddings -share_decoder_embeddings
    -param_init 0 -param_init_glorot

and a vocabulary whose first four ids are seqlab's (pad 0, unk 1, BOS 2, EOS 3), so the
same batches feed every implementation. Where its maths differs from the paper model the
others implement (and PEERS.md measured it that way too): **pre-LN** layers with a final
LayerNorm in the encoder and the decoder, no biases on the attention projections, and a
bias on the output projection. Same sizes otherwise: 7,577,408 trainable parameters at the
small config against 7,577,600.

Batch layout (OpenNMT-py 3.0 is batch-first, with a feature axis): src (B, S, 1),
src_len (B,), tgt (B, T + 1, 1) of which the decoder reads ``tgt[:, :-1]`` — seqlab's
``y_in`` with one pad column appended.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from benchmarks.peers_models import Size
from seqlab.data.collate import Seq2SeqBatch
from seqlab.data.vocab import PAD_ID


def onmt_options(size: Size) -> list[str]:
    """The ``onmt_train`` model options of ``size`` (module doc)."""
    p = str(size.dropout)
    return [
        *("-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding"),
        *("-enc_layers", str(size.layers), "-dec_layers", str(size.layers)),
        *("-heads", str(size.n_heads), "-hidden_size", str(size.d_model)),
        *("-word_vec_size", str(size.d_model), "-transformer_ff", str(size.d_ff)),
        *("-dropout", p, "-attention_dropout", p),
        *("-share_embeddings", "-share_decoder_embeddings"),
        *("-param_init", "0", "-param_init_glorot"),
    ]


def build_onmt(size: Size) -> nn.Module:
    """OpenNMT-py's ``NMTModel`` (its ``generator`` inside) of ``size``; ImportError when
    OpenNMT-py is not installed."""
    with warnings.catch_warnings():  # 3.0.4 uses torch.cuda.amp.custom_fwd (deprecated)
        warnings.simplefilter("ignore", FutureWarning)
        import onmt.opts as opts
        import pyonmttok
        from onmt.constants import DefaultTokens
        from onmt.model_builder import build_base_model
        from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    opts.train_opts(parser)
    required = ["-data", "{}", "-src_vocab", "unused"]  # data options the model ignores
    opt, unknown = parser.parse_known_args(required + onmt_options(size))
    if unknown:
        raise ValueError(f"OpenNMT-py did not take the options {unknown}")
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    specials = [DefaultTokens.PAD, DefaultTokens.UNK, DefaultTokens.BOS, DefaultTokens.EOS]
    words = [f"w{i}" for i in range(len(specials), size.vocab)]
    vocab = pyonmttok.build_vocab_from_tokens(words, special_tokens=specials)
    assert len(vocab) == size.vocab and vocab.lookup_token(DefaultTokens.PAD) == PAD_ID
    return build_base_model(opt, {"src": vocab, "tgt": vocab, "data_task": "seq2seq"}, gpu=False)


def onmt_logits(model: nn.Module, batch: Seq2SeqBatch) -> Tensor:
    """Teacher-forced logits (B, T, V) of an OpenNMT-py model on a seqlab batch."""
    src = batch.src[:, :, None]  # (B, S, 1)
    src_len = batch.src_mask.sum(1)  # (B,)
    pad = torch.full_like(batch.y_in[:, :1], PAD_ID)  # (B, 1) never read
    tgt = torch.cat([batch.y_in, pad], dim=1)[:, :, None]  # (B, T + 1, 1)
    dec_out, _ = model(src, tgt, src_len)  # (B, T, d)
    return model.generator(dec_out)  # (B, T, V)
