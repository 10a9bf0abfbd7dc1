"""Padding-free position-wise layers (seqlab.nn.row_packing, perf-notes-training.md §36):
the real positions' values and every gradient equal the padded computation's, in float64;
packing is used where it should be and nowhere else."""

import pytest
import torch

import seqlab.models.bahdanau  # noqa: F401  (registers "bahdanau")
import seqlab.models.transformer  # noqa: F401  (registers "transformer")
import seqlab.models.transformer_classifier  # noqa: F401  (registers "transformer_classifier")
from seqlab.data.collate import collate_seq2seq
from seqlab.nn.masks import attention_mask
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.row_packing import PaddedRows, exact_row_counts, padded_positions, row_bucket
from seqlab.nn.transformer import TransformerEncoder
from seqlab.nn.transformer_decoder import TransformerDecoder
from seqlab.registry import MODELS
from seqlab.tasks.algorithmic import AlgorithmicConfig, make_examples
from seqlab.tasks.base import seq2seq_token_loss

D, H, D_FF, V = 16, 2, 32, 14


def mask_of(lengths, T):
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)


def test_pack_and_unpack():
    keep = mask_of([3, 1, 4], 4)
    rows = PaddedRows(keep)
    x = torch.arange(3 * 4 * 2, dtype=torch.float64).view(3, 4, 2)
    packed = rows.pack(x)  # (8, 2)
    assert rows.n == 8 and packed.shape == (8, 2)
    torch.testing.assert_close(packed, x[keep], atol=0, rtol=0)
    back = rows.unpack(packed)
    torch.testing.assert_close(back, x * keep[..., None], atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"expected a \(3, 4, ...\) tensor"):
        rows.pack(torch.zeros(3, 5, 2))
    with pytest.raises(ValueError, match="expected 8 rows"):
        rows.unpack(torch.zeros(7, 2))
    with pytest.raises(ValueError, match="bool mask"):
        PaddedRows(keep.long())


def test_where_packing_applies():
    keep = mask_of([3, 1, 4], 4)
    assert PaddedRows.of(keep) is not None
    assert PaddedRows.of(None) is None
    assert PaddedRows.of(torch.ones(3, 4, dtype=torch.bool)) is None  # no padding
    assert PaddedRows.of(keep.to("meta")) is None  # off the CPU
    with padded_positions():
        assert PaddedRows.of(keep) is None
    assert PaddedRows.of(keep) is not None


def test_row_bucket_rounds_up_by_at_most_a_sixteenth():
    assert [row_bucket(n, 10**6) for n in (0, 1, 8, 9, 100, 128, 129, 1129, 1142)] == [
        0,
        8,
        8,
        16,
        104,
        128,
        136,
        1152,
        1152,
    ]  # g = 8 below 256, then 2^(⌊log₂ n⌋ − 4): 8 at 129, 64 at 1129
    for n in range(1, 5000):
        b = row_bucket(n, 10**6)
        assert n <= b <= max(n + 7, n + n / 16)
        assert row_bucket(b, 10**6) == b  # a bucket is its own bucket
    assert len({row_bucket(n, 10**6) for n in range(1025, 2049)}) == 16  # per doubling
    assert row_bucket(1129, 1140) == 1140  # never more rows than the batch has


def test_buckets_add_the_first_padding_positions():
    keep = mask_of([3, 1, 4], 5)  # 8 real of 15 -> 8: no extra
    assert PaddedRows(keep, bucket=True).n == 8
    keep = mask_of([3, 1, 5], 5)  # 9 real -> 16 rows: 7 padding positions, row-major
    rows = PaddedRows(keep, bucket=True)
    assert (rows.n, rows.n_real) == (15, 9)  # capped at B·T = 15
    keep = mask_of([9, 2, 3, 1], 9)  # 15 real of 36 -> 16: the first padding position
    rows = PaddedRows(keep, bucket=True)
    assert (rows.n, rows.n_real) == (16, 15)
    flat = keep.reshape(-1)
    extra = [i for i in rows.index.tolist() if not flat[i]]
    assert extra == [(~flat).nonzero()[0].item()]
    assert rows.index.tolist() == sorted(rows.index.tolist())  # still row-major
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    back = rows.unpack(rows.pack(x))
    torch.testing.assert_close(back[keep], x[keep], atol=0, rtol=0)


def test_buckets_only_under_cpu_autocast():
    keep = mask_of([9, 2, 3, 1], 9)  # 15 real tokens
    assert PaddedRows.of(keep).n == 15  # fp32: MKL has no per-shape cost
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert PaddedRows.of(keep).n == 16
        with exact_row_counts():
            assert PaddedRows.of(keep).n == 15
        assert PaddedRows.of(keep).n == 16


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_on_packed_rows_equals_padded(need_weights):
    """Packed (N, d) queries, keys and values: projections on the real rows, attention on
    the rows put back, W_o on the real rows again; the same values, weights and gradients."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).double()
    keep = mask_of([5, 2, 3], 5)
    mask = attention_mask(keep)  # (B, 1, 1, T)
    rows = PaddedRows(keep)
    x = torch.randn(3, 5, D, dtype=torch.float64, requires_grad=True)
    xp = rows.pack(x)  # (N, D)
    out, w = mha(xp, xp, xp, mask, need_weights, rows)  # (N, D)
    ref, w_ref = mha(x, x, x, mask, need_weights)  # (B, T, D)
    assert out.shape == (rows.n, D)
    torch.testing.assert_close(out, ref[keep], atol=1e-12, rtol=0)
    if need_weights:
        q_keep = keep[:, None, :, None]  # (B, 1, T, 1): the real query rows
        torch.testing.assert_close(w * q_keep, w_ref * q_keep, atol=1e-12, rtol=0)
    g_out = torch.autograd.grad(out.pow(2).sum(), [x, *mha.parameters()])
    g_ref = torch.autograd.grad(ref[keep].pow(2).sum(), [x, *mha.parameters()])
    for a, c in zip(g_out, g_ref):
        torch.testing.assert_close(a, c, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="self-attention"):
        mha(xp, x, x, mask, False, rows)


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_skipping_padding_equal_padded_at_real_positions(norm_first):
    torch.manual_seed(0)
    enc = TransformerEncoder(2, D, H, D_FF, dropout=0.0, norm_first=norm_first).double()
    dec = TransformerDecoder(2, D, H, D_FF, dropout=0.0, norm_first=norm_first).double()
    src_mask, tgt_mask = mask_of([6, 3, 4], 6), mask_of([2, 5, 4], 5)
    x = torch.randn(3, 6, D, dtype=torch.float64)
    y = torch.randn(3, 5, D, dtype=torch.float64)
    params = [*enc.parameters(), *dec.parameters()]

    def run(skip):
        memory = enc(x, src_mask, skip_padding=skip)[0]
        h = dec(y, memory, tgt_mask, src_mask, skip_padding=skip)[0]
        real = h[tgt_mask]  # (N, D)
        return real, torch.autograd.grad(real.pow(2).sum(), params)

    (h_skip, g_skip), (h_ref, g_ref) = run(True), run(False)
    torch.testing.assert_close(h_skip, h_ref, atol=1e-12, rtol=0)
    for a, b in zip(g_skip, g_ref):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_stacks_pack_only_when_asked(monkeypatch):
    calls = []
    real = PaddedRows.pack
    monkeypatch.setattr(PaddedRows, "pack", lambda self, x: calls.append(x.shape) or real(self, x))
    enc = TransformerEncoder(1, D, H, D_FF, dropout=0.0)
    x, src_mask = torch.randn(2, 4, D), mask_of([4, 2], 4)
    enc(x, src_mask)
    assert calls == []
    enc(x, src_mask, skip_padding=True)
    assert calls == [(2, 4, D), (2, 4, D)]  # the stack's input, then attention's output


def seq2seq_batch(n=6, seed=0):
    pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=7), n, seed)
    return collate_seq2seq(pairs)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_transformer_loss_on_real_rows_equals_padded(label_smoothing, monkeypatch):
    """The training loss with the output layer and the FFNs on real rows: the same loss,
    NLL, token count and gradients as every position computed (float64)."""
    entry = MODELS.get("transformer")
    cfg = entry.config_cls(
        d_model=D, n_heads=H, d_ff=D_FF, encoder_layers=2, decoder_layers=2, dropout=0.0
    )
    torch.manual_seed(0)
    model = entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=0).double()
    b = seq2seq_batch()
    assert not b.tgt_mask.all() and not b.src_mask.all()  # the batch has padding
    output_rows = []
    real_output = model.output
    monkeypatch.setattr(
        model, "output", lambda h: output_rows.append(h.shape[:-1].numel()) or real_output(h)
    )

    def run():
        out = seq2seq_token_loss(model, b, 0, label_smoothing)
        grads = torch.autograd.grad(out.loss_sum, list(model.parameters()), allow_unused=True)
        return out, grads

    packed, g_packed = run()
    assert output_rows == [b.n_tokens]  # the output layer saw the real rows only
    with padded_positions():
        padded, g_padded = run()
    assert output_rows[-1] == b.y_out.numel()
    assert packed.n_tokens == padded.n_tokens == b.n_tokens
    # token_cross_entropy sums the per-token losses in float32: equal to its rounding
    torch.testing.assert_close(packed.loss_sum, padded.loss_sum, atol=0, rtol=2**-22)
    torch.testing.assert_close(packed.nll_sum, padded.nll_sum, atol=0, rtol=2**-22)
    for a, c in zip(g_packed, g_padded):
        if a is None or c is None:
            assert a is None and c is None
            continue
        torch.testing.assert_close(a, c, atol=1e-10, rtol=0)


def test_transformer_loss_on_bucketed_rows_equals_padded():
    """With the row count bucketed (extra padding rows computed and discarded), the same
    loss, token count and gradients as every position computed. float64 is not autocast's
    to cast, so autocast only switches the buckets on here."""
    entry = MODELS.get("transformer")
    cfg = entry.config_cls(
        d_model=D, n_heads=H, d_ff=D_FF, encoder_layers=2, decoder_layers=2, dropout=0.0
    )
    torch.manual_seed(0)
    model = entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=0).double()
    b = seq2seq_batch(n=7, seed=3)
    n_rows = row_bucket(b.n_tokens, b.y_out.numel())
    assert b.n_tokens < n_rows < b.y_out.numel()  # the batch gets extra rows
    seen = []
    real_output = model.output
    model.output = lambda h: seen.append(h.shape[:-1].numel()) or real_output(h)

    def run():
        out = seq2seq_token_loss(model, b, 0, 0.1)
        return out, torch.autograd.grad(out.loss_sum, list(model.parameters()))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        bucketed, g_bucketed = run()
    assert seen == [n_rows]
    with padded_positions():
        padded, g_padded = run()
    assert bucketed.n_tokens == padded.n_tokens == b.n_tokens
    torch.testing.assert_close(bucketed.loss_sum, padded.loss_sum, atol=0, rtol=2**-22)
    for a, c in zip(g_bucketed, g_padded):
        torch.testing.assert_close(a, c, atol=1e-10, rtol=0)


def test_models_without_output_rows_take_the_padded_logits():
    entry = MODELS.get("bahdanau")
    torch.manual_seed(0)
    model = entry.target(entry.config_cls(), src_vocab=V, tgt_vocab=V).eval()  # no dropout
    assert not getattr(model, "output_rows", False)
    b = seq2seq_batch()
    out = seq2seq_token_loss(model, b, 0, 0.1)
    with padded_positions():
        ref = seq2seq_token_loss(model, b, 0, 0.1)
    torch.testing.assert_close(out.loss_sum, ref.loss_sum, atol=0, rtol=0)


@pytest.mark.parametrize("bucket", [False, True])
@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_transformer_classifier_skipping_padding_equals_padded(pool, bucket):
    """Mean and [CLS] pooling read real positions only: logits and gradients equal, also
    with bucketed rows (extra padding rows computed; float64, which autocast leaves
    alone, so autocast only switches the buckets on)."""
    entry = MODELS.get("transformer_classifier")
    cfg = entry.config_cls(d_model=D, n_heads=H, d_ff=D_FF, n_layers=2, dropout=0.0, pool=pool)
    torch.manual_seed(0)
    model = entry.target(cfg, vocab=V, n_classes=3, pad_id=0).double()
    mask = mask_of([7, 2, 5, 3], 7)
    x = torch.randint(1, V, (4, 7)) * mask
    params = list(model.parameters())
    with padded_positions():
        ref = model(x, mask)
        g_ref = torch.autograd.grad(ref.pow(2).sum(), params, allow_unused=True)
    real = mask.sum().item() + (4 if pool == "cls" else 0)  # [CLS] adds one row each
    assert row_bucket(real, 28 + (4 if pool == "cls" else 0)) > real  # the bucket adds rows
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bucket):
        out = model(x, mask)
        g_out = torch.autograd.grad(out.pow(2).sum(), params, allow_unused=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    for a, c in zip(g_out, g_ref):
        if a is None or c is None:
            assert a is None and c is None
            continue
        torch.testing.assert_close(a, c, atol=1e-12, rtol=0)
