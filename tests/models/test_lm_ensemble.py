"""seqlab.models.lm_ensemble: the linear pool of language models is the members' mean
probability (by hand), for every LM family; stepping it token by token equals reading the
whole sequence; carrying its state over two chunks equals one chunk (truncated BPTT);
one member pooled alone is the member; its NLL is never above the members' mean
(Jensen)."""

import pytest
import torch

import seqlab.ensemble_load  # noqa: F401  (imports, so registers, every LM family)
from seqlab.models.lm_common import detach_state, prime
from seqlab.models.lm_ensemble import LMEnsemble, LMEnsembleState
from seqlab.registry import MODELS

V = 13
FAMILIES = {
    "rnn_lm": {"cell": "lstm", "emb_dim": 12, "hidden": 12, "layers": 2, "dropout": 0.0},
    "transformer_lm": {"d_model": 16, "n_heads": 2, "d_ff": 32, "layers": 2, "context": 12,
                       "dropout": 0.0},
    "nplm": {"n": 4, "m": 6, "h": 8},
    "pointer_sentinel": {"emb_dim": 8, "hidden": 8, "layers": 2, "window": 5, "dropout": 0.0},
}  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")


def build(name: str, seed: int, **over):
    torch.manual_seed(seed)
    entry = MODELS.get(name)
    kw = {k: v for k, v in FAMILIES[name].items() if k in entry.config_cls.__dataclass_fields__}
    kw.update(over)
    return entry.target(entry.config_cls(**kw), vocab=V, pad_id=0).eval()


def tokens(B=3, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (B, T), generator=g)


def pool_of(name: str, m: int = 2) -> LMEnsemble:
    return LMEnsemble([build(name, seed) for seed in range(m)]).eval()


@pytest.mark.parametrize("name", FAMILIES)
def test_pool_is_the_members_mean_probability(name):
    pool, x = pool_of(name), tokens()
    with torch.no_grad():
        got = pool(x).logits  # (B, T, V)
        p = [torch.softmax(m(x).logits, -1) for m in pool.members]  # 2 × (B, T, V)
    assert got.shape == (3, 10, V)
    torch.testing.assert_close(got, torch.log((p[0] + p[1]) / 2), atol=1e-5, rtol=0)
    assert not torch.allclose(p[0], p[1])  # two different members
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(3, 10), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", FAMILIES)
def test_step_by_step_equals_forward(name):
    pool, x = pool_of(name), tokens()
    with torch.no_grad():
        whole = pool(x).logits  # (B, T, V)
        state, rows = pool.init_state(3, "cpu"), []
        for t in range(x.size(1)):
            log_p, state = pool.step(x[:, t], state)  # (B, V)
            rows.append(log_p)
    torch.testing.assert_close(torch.stack(rows, 1), whole, atol=1e-5, rtol=0)
    assert isinstance(state, LMEnsembleState) and len(state.members) == 2


@pytest.mark.parametrize("name", FAMILIES)
def test_state_carried_over_two_chunks_equals_one(name):
    pool, x = pool_of(name), tokens()
    with torch.no_grad():
        whole = pool(x).logits
        # from the initial state: a Transformer LM's forward from None carries nothing
        first = pool(x[:, :4], pool.init_state(3, "cpu"))
        second = pool(x[:, 4:], detach_state(first.state))  # what truncated BPTT carries
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), whole, atol=1e-5,
                               rtol=0)  # fmt: skip


@pytest.mark.parametrize("name", FAMILIES)
def test_one_member_is_the_member_and_the_pool_nll_is_below_the_mean(name):
    pool, x = pool_of(name, m=3), tokens(T=10, seed=1)
    y = tokens(T=10, seed=2)
    with torch.no_grad():
        alone = LMEnsemble([pool.members[0]])(x).logits
        torch.testing.assert_close(alone, torch.log_softmax(pool.members[0](x).logits, -1),
                                   atol=1e-6, rtol=0)  # fmt: skip

        def nll(logits):
            return float(-torch.log_softmax(logits, -1).gather(-1, y[..., None]).sum())

        members = [nll(m(x).logits) for m in pool.members]
        assert nll(pool(x).logits) <= sum(members) / 3 + 1e-4  # Jensen


def test_prime_reads_at_most_the_shortest_context():
    # Transformer LMs of context 12 and 6 with an LSTM LM: a prompt is cut to 6 − 1 tokens
    pool = LMEnsemble(
        [build("transformer_lm", 1), build("transformer_lm", 0, context=6), build("rnn_lm", 2)]
    )
    assert pool.cfg.context == 6 and not hasattr(LMEnsemble([build("nplm", 0)]).cfg, "context")
    with torch.no_grad():
        state = prime(pool, tokens(B=1, T=9))
        log_p, _ = pool.step(tokens(B=1, T=1)[:, 0], state)  # (1, V)
    assert [s.tokens.size(1) for s in state.members[:2]] == [5, 5]
    torch.testing.assert_close(log_p.exp().sum(), torch.tensor(1.0), atol=1e-5, rtol=0)


def test_language_models_pool_across_types_and_other_models_do_not():
    from types import SimpleNamespace

    from seqlab.config import ConfigError
    from seqlab.ensemble_load import check_members

    class Task:  # what check_members reads of a task
        def tokenizer_state(self):
            return {"vocab": V}

        def model_kwargs(self):
            return {"vocab": V}

    def run(model):
        return SimpleNamespace(task=Task(), model=model)

    lms = [run(build("rnn_lm", 0)), run(build("transformer_lm", 1)), run(build("nplm", 2))]
    check_members(["a", "b", "c"], lms)  # three LM types: one pool
    with pytest.raises(ConfigError, match="b: its model is a GRU, a's a RNNLM"):
        check_members(["a", "b"], [lms[0], run(torch.nn.GRU(4, 4))])
    with pytest.raises(ConfigError, match="ensemble models of one type"):
        check_members(["a", "b"], [run(torch.nn.GRU(4, 4)), run(torch.nn.LSTM(4, 4))])
