"""The decoder-only Transformer LM: cached step == causal forward, continuing a cache ==
one forward, the sliding window past the context, causality, tied embeddings, rebuild."""

import pytest
import torch

from seqlab.config import from_dict, to_dict
from seqlab.decode.state import reorder_state
from seqlab.models.lm_common import prime, token_log_probs
from seqlab.models.transformer_lm import TransformerLM, TransformerLMConfig
from seqlab.nn.masks import causal_mask
from seqlab.registry import MODELS
from seqlab.tasks.base import token_cross_entropy

V = 15


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def build(**kw):
    args = {"d_model": 16, "n_heads": 2, "d_ff": 32, "layers": 2, "context": 10, **kw}
    cfg = TransformerLMConfig(**args)
    return TransformerLM(cfg, V), cfg


def tokens(B=3, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (B, T), generator=g)


VARIANTS = [
    {},
    {"norm_first": False, "activation": "relu", "positions": "sinusoidal"},
    {"tie_output": False, "scale_embeddings": True},
]


@pytest.mark.parametrize("kw", VARIANTS)
def test_cached_step_by_step_equals_causal_forward(kw):
    model, _ = build(**kw)
    model.eval()
    x = tokens()
    with torch.no_grad():
        full = model(x).logits
        state, steps = None, []
        for t in range(x.size(1)):
            logits, state = model.step(x[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=0)
    assert state.length == x.size(1) and torch.equal(state.tokens, x)


def test_continuing_a_cache_equals_one_forward_and_forward_carries_nothing():
    model, _ = build()
    model.eval()
    x = tokens()
    with torch.no_grad():
        whole = model(x)
        first = model(x[:, :4], model.init_state(3))
        second = model(x[:, 4:], first.state)
    assert whole.state is None  # training chunks carry no state
    both = torch.cat([first.logits, second.logits], dim=1)
    torch.testing.assert_close(both, whole.logits, atol=1e-5, rtol=0)


def test_future_tokens_do_not_change_earlier_logits():
    model, _ = build()
    model.eval()
    x = tokens()
    y = x.clone()
    y[:, 6:] = 4
    with torch.no_grad():
        a, b = model(x).logits, model(y).logits
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-4


def test_past_the_context_step_conditions_on_a_sliding_window():
    model, cfg = build()
    model.eval()
    x = tokens(T=16)
    with torch.no_grad():
        state = None
        for t in range(x.size(1)):
            logits, state = model.step(x[:, t], state)
        window = model(x[:, -cfg.context :]).logits[:, -1]  # the last `context` tokens
    torch.testing.assert_close(logits, window, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="exceed the context"):
        model(tokens(T=11))


def test_prime_and_token_log_probs_agree_with_the_forward():
    model, _ = build()
    model.eval()
    x = tokens(T=8)
    with torch.no_grad():
        state = prime(model, x[:, :5])
        logits, _ = model.step(x[:, 5], state)
        full = model(x).logits
        lp = token_log_probs(model, x[:, :1], x[:, 1:])
    torch.testing.assert_close(logits, full[:, 5], atol=1e-5, rtol=0)
    ref = torch.log_softmax(full[:, :-1], -1).gather(2, x[:, 1:, None])[..., 0]
    torch.testing.assert_close(lp, ref, atol=1e-5, rtol=0)


def test_tied_embeddings_share_storage():
    model, _ = build()
    assert model.head.W_out is None
    assert not any("W_out" in n for n, _ in model.named_parameters())
    untied, _ = build(tie_output=False)
    n_tied = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in untied.parameters()) == n_tied + V * 16  # one (V, D) less
    seen = {}
    model.head.register_forward_hook(lambda m, args, out: seen.update(h=args[0]))
    model.eval()
    out = model(tokens()).logits
    torch.testing.assert_close(out, seen["h"] @ model.embed.weight.T, atol=1e-6, rtol=0)
    out.sum().backward()
    assert model.embed.weight.grad[3].abs().sum() > 0  # id 3 is never read, only predicted


@pytest.mark.parametrize("kw", VARIANTS)
def test_every_parameter_gets_a_gradient_and_the_config_rebuilds_it(kw):
    model, cfg = build(dropout=0.1, **kw)
    x, y = tokens(), tokens(seed=1)
    logits = model(x).logits
    assert logits.shape == (3, 10, V) and torch.isfinite(logits).all()
    token_cross_entropy(logits, y, 0).loss_sum.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    rebuilt = from_dict(TransformerLMConfig, to_dict(cfg))
    assert rebuilt == cfg
    clone = MODELS.get("transformer_lm").target(rebuilt, vocab=V)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(x).logits, model(x).logits, atol=0, rtol=0)


def test_the_state_reorders_for_batched_search():
    model, _ = build()
    model.eval()
    x = tokens(T=5)
    with torch.no_grad():
        state = prime(model, x)
        index = torch.tensor([2, 2, 0])
        picked = reorder_state(state, index)
        a, _ = model.step(x[index, -1], picked)
        b, _ = model.step(x[:, -1], state)
    torch.testing.assert_close(a, b[index], atol=1e-6, rtol=0)
    assert picked.detach().layers[0].k.shape[0] == 3


def test_it_learns_a_repeating_stream():
    torch.manual_seed(0)
    model, _ = build()
    stream = torch.arange(4, 4 + 7).repeat(4, 2)[:, :11]  # (4, 11)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        loss = token_cross_entropy(model(stream[:, :-1]).logits, stream[:, 1:], 0)
        mean = loss.loss_sum / loss.n_tokens
        losses.append(float(mean.detach()))
        opt.zero_grad()
        mean.backward()
        opt.step()
    assert losses[-1] < 0.2 * losses[0]


@pytest.mark.parametrize("kw", VARIANTS[:2])
def test_attention_maps_are_the_masked_softmax_of_each_layer_by_hand(kw):
    torch.manual_seed(0)
    model, cfg = build(**kw)
    model = model.double().eval()
    x = tokens(B=2, T=7)
    maps = model.attention_maps(x)  # (L, B, H, T, T)
    L, H, T, dk = cfg.layers, cfg.n_heads, 7, cfg.d_model // cfg.n_heads
    assert maps.shape == (L, 2, H, T, T)
    torch.testing.assert_close(maps.sum(-1), torch.ones(L, 2, H, T, dtype=torch.float64))
    assert float(maps.triu(1).abs().max()) == 0.0  # position t never reads i > t
    # by hand, layer by layer: α = softmax(q kᵀ / √d_k) over i ≤ t on the layer's input
    h = model.pos(model.embed(x), offset=0)  # (B, T, D)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T)
    for layer_i, layer in enumerate(model.layers):
        a_in = layer.norm1(h) if layer.norm_first else h  # (B, T, D)
        mha = layer.self_attn
        q = mha.W_q(a_in).view(2, T, H, dk).transpose(1, 2)  # (B, H, T, dk)
        k = mha.W_k(a_in).view(2, T, H, dk).transpose(1, 2)  # (B, H, T, dk)
        scores = (q @ k.transpose(-1, -2) / dk**0.5).masked_fill(future, float("-inf"))
        torch.testing.assert_close(maps[layer_i], scores.softmax(-1), atol=1e-12, rtol=0)
        h, _ = layer(h, causal_mask(T, T, x.device))  # the forward's own path to the next
    with pytest.raises(ValueError, match="exceed the context"):
        model.attention_maps(tokens(B=1, T=11))
