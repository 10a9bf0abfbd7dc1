"""CopyNet's selective read (Gu et al. 2016, §3.3), uniform ρ: hand-built cases."""

import torch

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.nn.selective_read import selective_read


def states(S=5, D=3):
    return torch.arange(S * D, dtype=torch.float64).view(1, S, D)  # h_τ = [3τ, 3τ+1, 3τ+2]


def test_one_match_reads_that_state_two_matches_their_mean_none_reads_zero():
    h = states()
    src_ext = torch.tensor([[12, 7, 12, 20, EOS_ID]])  # 20 = an extended id V + k
    mask = torch.tensor([[True] * 5])
    y = torch.tensor([[7, 12, 20, 9]])  # (1, T=4)
    zeta = selective_read(y, src_ext, mask, h)  # (1, 4, 3)
    torch.testing.assert_close(zeta[0, 0], h[0, 1], atol=0, rtol=0)  # x_1 = 7
    torch.testing.assert_close(zeta[0, 1], (h[0, 0] + h[0, 2]) / 2, atol=0, rtol=0)  # K = 2
    torch.testing.assert_close(zeta[0, 2], h[0, 3], atol=0, rtol=0)  # the copied OOV id
    assert torch.equal(zeta[0, 3], torch.zeros(3, dtype=torch.float64))  # 9 not in source


def test_specials_and_masked_positions_read_nothing():
    h = states()
    src_ext = torch.tensor([[PAD_ID, UNK_ID, BOS_ID, EOS_ID, 30]])
    mask = torch.tensor([[True, True, True, True, False]])  # 30 sits in padding
    y = torch.tensor([[PAD_ID, UNK_ID, BOS_ID, EOS_ID, 30]])
    assert torch.equal(selective_read(y, src_ext, mask, h), torch.zeros(1, 5, 3).double())


def test_one_step_equals_the_sequence_column_and_rows_are_independent():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    src_ext = torch.randint(4, 9, (3, 6), generator=g)
    mask = torch.arange(6)[None] < torch.tensor([[6], [4], [2]])
    y = torch.randint(0, 9, (3, 5), generator=g)
    full = selective_read(y, src_ext, mask, h)  # (3, 5, 4)
    for t in range(5):
        torch.testing.assert_close(selective_read(y[:, t], src_ext, mask, h), full[:, t])
    for b in range(3):
        one = selective_read(y[b : b + 1], src_ext[b : b + 1], mask[b : b + 1], h[b : b + 1])
        torch.testing.assert_close(one[0], full[b])
    # by definition, row by row: the mean of the matching unmasked states
    for b in range(3):
        for t in range(5):
            hit = (src_ext[b] == y[b, t]) & mask[b] & (y[b, t] > EOS_ID)
            want = h[b][hit].mean(0) if hit.any() else torch.zeros(4, dtype=torch.float64)
            torch.testing.assert_close(full[b, t], want)
