"""Linear-chain CRF: log Z, path scores and Viterbi against brute-force enumeration of all
K^n tag paths (float64), the NLL gradient by gradcheck, batched == one sentence at a time,
and the IOB2 constraint."""

import itertools
import math

import pytest
import torch

from seqlab.data.conll import CONLL2003_TAGS
from seqlab.nn.crf import CRF, iob2_allowed, viterbi

TAGS5 = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def make_crf(K=3, constraint="none", tags=None, seed=0):
    torch.manual_seed(seed)
    crf = CRF(K, constraint, tags).double()
    with torch.no_grad():  # larger than the default init, so paths differ clearly
        crf.A.normal_()
        crf.A_start.normal_()
        crf.A_end.normal_()
    return crf


def random_batch(lengths, K, seed=1):
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    P = torch.randn(B, T, K, generator=g, dtype=torch.float64)  # (B, T, K)
    y = torch.randint(0, K, (B, T), generator=g)  # (B, T)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]  # (B, T)
    return P, y, mask


def path_score(crf, P_b, path):
    """s(x, y) written out term by term for one sentence (P_b: (n, K))."""
    A, A_start, A_end = crf.transitions(torch.float64)
    s = A_start[path[0]] + A_end[path[-1]]
    for t, k in enumerate(path):
        s = s + P_b[t, k]
        if t:
            s = s + A[path[t - 1], k]
    return float(s.detach())


def all_paths(crf, P_b):
    """Every path of length n with its score (forbidden ones score −∞)."""
    n, K = P_b.shape
    return [(p, path_score(crf, P_b, p)) for p in itertools.product(range(K), repeat=n)]


def brute_log_Z(crf, P_b):
    scores = [s for _, s in all_paths(crf, P_b) if s > -math.inf]
    m = max(scores)
    return m + math.log(sum(math.exp(s - m) for s in scores))


def brute_best(crf, P_b):
    return max(all_paths(crf, P_b), key=lambda ps: ps[1])


LENGTHS = [5, 3, 1, 4, 2]


@pytest.mark.parametrize("K", [2, 3])
def test_log_partition_and_score_equal_brute_force(K):
    crf = make_crf(K)
    P, y, mask = random_batch(LENGTHS, K)
    log_Z = crf.log_partition(P, mask)
    score = crf.score(P, y, mask)
    for b, n in enumerate(LENGTHS):
        expected = brute_log_Z(crf, P[b, :n])
        torch.testing.assert_close(log_Z[b].item(), expected, atol=1e-10, rtol=0)
        gold = path_score(crf, P[b, :n], y[b, :n].tolist())
        torch.testing.assert_close(score[b].item(), gold, atol=1e-10, rtol=0)


def test_probabilities_sum_to_one():
    """Σ_y p(y | x) = 1 over all K^n paths (checks log Z and s together)."""
    K, n = 3, 4
    crf = make_crf(K)
    P, _, mask = random_batch([n], K)
    nlls = []
    for path in itertools.product(range(K), repeat=n):
        nlls.append(crf.nll(P, torch.tensor([path]), mask))
    total = torch.exp(-torch.cat(nlls)).sum()
    torch.testing.assert_close(total.item(), 1.0, atol=1e-12, rtol=0)


@pytest.mark.parametrize("K", [2, 3, 4])
def test_viterbi_equals_brute_force_argmax(K):
    crf = make_crf(K, seed=K)
    P, _, mask = random_batch(LENGTHS, K, seed=K)
    tags, scores = crf.decode(P, mask)
    for b, n in enumerate(LENGTHS):
        best_path, best_score = brute_best(crf, P[b, :n])
        assert tags[b, :n].tolist() == list(best_path)
        assert (tags[b, n:] == 0).all()
        torch.testing.assert_close(scores[b].item(), best_score, atol=1e-10, rtol=0)


def test_constrained_log_Z_and_viterbi_equal_brute_force_over_valid_paths():
    crf = make_crf(5, "iob2", TAGS5)
    P, _, mask = random_batch([4, 2, 1], 5, seed=3)
    log_Z = crf.log_partition(P, mask)
    tags, scores = crf.decode(P, mask)
    for b, n in enumerate([4, 2, 1]):
        torch.testing.assert_close(log_Z[b].item(), brute_log_Z(crf, P[b, :n]), atol=1e-10, rtol=0)
        best_path, best_score = brute_best(crf, P[b, :n])
        assert tags[b, :n].tolist() == list(best_path)
        torch.testing.assert_close(scores[b].item(), best_score, atol=1e-10, rtol=0)


def is_valid_iob2(tags):
    prev = "O"
    for tag in tags:
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            return False
        prev = tag
    return True


def test_constrained_decoding_never_emits_invalid_iob2():
    tags = CONLL2003_TAGS
    K = len(tags)
    crf = make_crf(K, "iob2", tags)
    unconstrained = make_crf(K, "none", tags)
    unconstrained.load_state_dict(crf.state_dict())
    g = torch.Generator().manual_seed(0)
    i_tags = torch.tensor([t.startswith("I-") for t in tags])
    invalid_free = 0
    for _ in range(20):
        P = 3 * torch.randn(16, 12, K, generator=g, dtype=torch.float64)  # (B, T, K)
        P = P + 4.0 * i_tags  # emissions push hard towards I- tags
        lengths = torch.randint(1, 13, (16,), generator=g)
        mask = torch.arange(12)[None] < lengths[:, None]
        out = crf.decode(P, mask)[0]
        for row, n in zip(out.tolist(), lengths.tolist()):
            assert is_valid_iob2([tags[k] for k in row[:n]])
        free = unconstrained.decode(P, mask)[0]
        invalid_free += sum(
            not is_valid_iob2([tags[k] for k in row[:n]])
            for row, n in zip(free.tolist(), lengths.tolist())
        )
    assert invalid_free > 0  # without the constraint these emissions do give invalid paths


def test_iob2_allowed_table():
    allowed, start = iob2_allowed(TAGS5)
    name = {t: i for i, t in enumerate(TAGS5)}
    assert not allowed[name["O"], name["I-PER"]]
    assert not allowed[name["B-LOC"], name["I-PER"]]
    assert not allowed[name["I-LOC"], name["I-PER"]]
    assert allowed[name["B-PER"], name["I-PER"]] and allowed[name["I-PER"], name["I-PER"]]
    assert allowed[name["I-PER"], name["O"]] and allowed[name["O"], name["B-LOC"]]
    assert start.tolist() == [True, True, False, True, False]
    assert int((~allowed).sum()) == 2 * 3  # each I- tag: O and the other type's B-, I-


def test_nll_gradcheck_with_masks():
    K = 3
    crf = make_crf(K)
    P, y, mask = random_batch([4, 2, 3], K, seed=5)
    P.requires_grad_(True)
    params = (crf.A, crf.A_start, crf.A_end)

    def f(P, A, A_start, A_end):  # CRF.forward is the NLL
        return torch.func.functional_call(
            crf, {"A": A, "A_start": A_start, "A_end": A_end}, (P, y, mask)
        )

    inputs = (P, *[p.detach().clone().requires_grad_(True) for p in params])
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_constrained_nll_gradcheck():
    crf = make_crf(5, "iob2", TAGS5)
    P, _, mask = random_batch([3, 2], 5, seed=6)
    y = torch.tensor([[1, 2, 0], [3, 4, 0]])  # B-PER I-PER O / B-LOC I-LOC
    P.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda P: crf.nll(P, y, mask), (P,), eps=1e-6, atol=1e-7, rtol=1e-5
    )
    loss = crf.nll(P, y, mask).sum()
    loss.backward()
    assert torch.isfinite(crf.A.grad).all()
    forbidden = ~crf.allowed
    assert (crf.A.grad[forbidden] == 0).all()  # −∞ transitions get no gradient


def test_batched_equals_one_by_one_and_padding_changes_nothing():
    K = 4
    crf = make_crf(K, seed=7)
    P, y, mask = random_batch(LENGTHS, K, seed=7)
    nll = crf.nll(P, y, mask)
    tags, scores = crf.decode(P, mask)
    for b, n in enumerate(LENGTHS):
        one = torch.ones(1, n, dtype=torch.bool)
        torch.testing.assert_close(
            crf.nll(P[b : b + 1, :n], y[b : b + 1, :n], one)[0], nll[b], atol=1e-12, rtol=0
        )
        t1, s1 = crf.decode(P[b : b + 1, :n], one)
        assert t1[0].tolist() == tags[b, :n].tolist()
        torch.testing.assert_close(s1[0], scores[b], atol=1e-12, rtol=0)
    # three more padded steps with garbage emissions and tags
    extra = 100 * torch.randn(len(LENGTHS), 3, K, dtype=torch.float64)
    P2 = torch.cat([P, extra], 1)
    y2 = torch.cat([y, torch.randint(0, K, (len(LENGTHS), 3))], 1)
    mask2 = torch.cat([mask, torch.zeros(len(LENGTHS), 3, dtype=torch.bool)], 1)
    torch.testing.assert_close(crf.nll(P2, y2, mask2), nll, atol=1e-12, rtol=0)
    assert torch.equal(crf.decode(P2, mask2)[0][:, : P.shape[1]], tags)


def test_fp32_and_bf16_emissions_are_upcast():
    crf = CRF(3)
    P, y, mask = random_batch([3, 2], 3)
    ref = crf.nll(P.float(), y, mask)
    assert ref.dtype == torch.float32
    low = crf.nll(P.bfloat16(), y, mask)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, crf.nll(P.bfloat16().float(), y, mask), atol=0, rtol=0)


def test_errors():
    crf = CRF(3)
    P, y, mask = random_batch([3, 2], 3)
    bad = mask.clone()
    bad[1, 0] = False
    with pytest.raises(ValueError, match="at least one word"):
        crf.log_partition(P, bad)
    with pytest.raises(ValueError, match="K=3"):
        crf.log_partition(torch.randn(2, 3, 4), mask)
    with pytest.raises(ValueError, match="tag names"):
        CRF(3, "iob2")
    with pytest.raises(ValueError, match="bool mask"):
        viterbi(P, mask.long(), crf.A, crf.A_start, crf.A_end)
