"""pad_batch and collate_seq2seq: equality with pad_sequence, masks, the teacher-forcing shift."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils.rnn import pad_sequence

from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq, pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID

FAST = settings(max_examples=30, deadline=None)
ids = st.lists(st.lists(st.integers(4, 50), max_size=9), min_size=1, max_size=6)


@FAST
@given(seqs=ids, pad=st.integers(0, 3))
def test_pad_batch_equals_torch_pad_sequence(seqs, pad):
    tokens, lengths = pad_batch(seqs, pad_id=pad)
    ref = pad_sequence(
        [torch.tensor(s, dtype=torch.long) for s in seqs], batch_first=True, padding_value=pad
    )
    assert tokens.dtype == torch.long and lengths.dtype == torch.long
    assert torch.equal(tokens, ref)  # exact (integers)
    assert lengths.tolist() == [len(s) for s in seqs]
    tokens_t, lengths_t = pad_batch([torch.tensor(s, dtype=torch.int32) for s in seqs], pad)
    assert torch.equal(tokens_t, ref) and torch.equal(lengths_t, lengths)


def test_pad_batch_worked_example():
    tokens, lengths = pad_batch([[5, 6, 7], [], [8]])
    assert tokens.tolist() == [[5, 6, 7], [0, 0, 0], [8, 0, 0]]
    assert lengths.tolist() == [3, 0, 1]


def test_pad_batch_rejects_empty_batch_and_2d_tensors():
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([])
    with pytest.raises(ValueError, match="1-D"):
        pad_batch([torch.ones(2, 2, dtype=torch.long)])


def test_collate_seq2seq_worked_example():
    batch = collate_seq2seq([([11, 12, 13], [21, 22]), ([14], [23, 24, 25]), ([15, 16], [])])
    assert batch.src.tolist() == [[11, 12, 13], [14, 0, 0], [15, 16, 0]]
    assert batch.src_lengths.tolist() == [3, 1, 2]
    assert batch.src_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert batch.y_in.tolist() == [[2, 21, 22, 0], [2, 23, 24, 25], [2, 0, 0, 0]]
    assert batch.y_out.tolist() == [[21, 22, 3, 0], [23, 24, 25, 3], [3, 0, 0, 0]]
    assert batch.tgt_lengths.tolist() == [3, 4, 1]
    assert batch.tgt_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert batch.n_tokens == 8
    assert batch.src_mask.dtype == torch.bool and batch.tgt_mask.dtype == torch.bool
    assert batch.batch_size == 3


@FAST
@given(srcs=ids, tgts=ids, data=st.data())
def test_collate_seq2seq_invariants(srcs, tgts, data):
    B = min(len(srcs), len(tgts))
    pairs = list(zip(srcs[:B], tgts[:B]))
    use_tensors = data.draw(st.booleans())
    if use_tensors:
        pairs = [
            (torch.tensor(s, dtype=torch.long), torch.tensor(t, dtype=torch.long)) for s, t in pairs
        ]
    b = collate_seq2seq(pairs, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
    m = torch.tensor([len(t) for _, t in pairs])
    T = int(m.max()) + 1
    assert b.y_in.shape == b.y_out.shape == b.tgt_mask.shape == (B, T)
    assert b.src.shape == b.src_mask.shape == (B, max(len(s) for s, _ in pairs))
    # masks: real ids are >= 4 here, so "not pad" is exactly the mask
    assert torch.equal(b.src_mask, b.src != PAD_ID)
    assert torch.equal(b.tgt_mask, b.y_out != PAD_ID)
    assert torch.equal(b.tgt_mask, b.y_in != PAD_ID)
    # the shift: y_out[t] is the token after y_in[t]; y_in starts with <s>; y_out ends with </s>
    assert (b.y_in[:, 0] == BOS_ID).all()
    inner = b.tgt_mask[:, 1:]  # (B, T - 1) positions t ≥ 1 that are real in y_in
    assert torch.equal(b.y_in[:, 1:][inner], b.y_out[:, :-1][inner])
    assert torch.equal(b.y_out[torch.arange(B), m], torch.full((B,), EOS_ID))
    assert (b.y_out == EOS_ID).sum() == B and (b.y_in == BOS_ID).sum() == B
    assert b.n_tokens == int(b.tgt_mask.sum()) == int((m + 1).sum())


def test_to_moves_every_tensor_and_keeps_counts():
    b = collate_seq2seq([([5, 6], [7]), ([8], [9, 10])])
    moved = b.to("meta")
    assert isinstance(moved, Seq2SeqBatch)
    tensors = [v for v in vars(moved).values() if isinstance(v, torch.Tensor)]
    assert len(tensors) == 7 and all(t.device.type == "meta" for t in tensors)
    assert moved.n_tokens == b.n_tokens == 5
    assert b.src.device.type == "cpu"  # the original is unchanged


def test_collate_rejects_empty():
    with pytest.raises(ValueError, match="at least one"):
        collate_seq2seq([])
