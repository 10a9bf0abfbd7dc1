"""Static decoder-state fields: beam search leaves them in place, and nothing changes.

A field declared with ``static_field`` (encoder memory, cross-attention K/V, precomputed
attention keys, source masks, image regions) is the same for every hypothesis of an
input, and beam search's reorder index stays inside each input's block of K rows, so
``reorder_state(..., within_inputs=True)`` may return it uncopied. Proven here:

- the rule itself: static fields kept (same object) only with ``within_inputs=True``,
  copied by the default reorder, by ``full_reorder()`` and by a class whose ``reorder``
  does not take the keyword;
- beam search's index maps row b·K + k to a row b·K + k′ of the same input, every step;
- for every seq2seq family and the captioner (float64, random weights, padded batch):
  ``step`` passes each static field through as the same object (so the K copies made by
  ``repeat_rows`` stay identical); beam search gives the same tokens, lengths (exact),
  scores / log P and the logits of every hypothesis at every step (atol 1e-12) with and
  without the skip (the logits matter: random tiny models often keep the same 1-best
  even when a reorder is wrong); and the static tensors the
  decoder receives keep their ``data_ptr`` from the second step (the first after the
  expansion to B·K rows) to the last (while under ``full_reorder()`` they are new copies
  every step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import seqlab.decode.beam as beam_module
import seqlab.models.bahdanau  # noqa: F401  (registers the seq2seq models used by name)
import seqlab.models.cho  # noqa: F401
import seqlab.models.convs2s  # noqa: F401
import seqlab.models.luong  # noqa: F401
import seqlab.models.sutskever  # noqa: F401
import seqlab.models.transformer  # noqa: F401
from seqlab.data.collate import collate_seq2seq
from seqlab.data.geometry import make_examples as geometry_examples
from seqlab.data.oov import collate_copy, make_copy_example
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab
from seqlab.decode import beam_search, reorder_state
from seqlab.decode.state import full_reorder, is_static, repeat_rows, static_field
from seqlab.models.captioner import ShowAttendTell, ShowAttendTellConfig
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.models.pointer_net import END, PointerNet, PointerNetConfig
from seqlab.registry import MODELS
from seqlab.tasks.algorithmic import AlgorithmicConfig, make_examples
from seqlab.tasks.pointer_tasks import POS_PAD, collate_pointer

V = 14
K, N_BEST, MAX_LEN = 3, 3, 9  # n_best = K: every final hypothesis is compared
pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------ the rule


@dataclass
class Toy:
    h: torch.Tensor  # (B, 2) per hypothesis
    memory: torch.Tensor = static_field()  # (B, 3) per input


def rows(B, width):
    """Row b holds b everywhere: a reorder is readable from the values."""
    return torch.arange(B, dtype=torch.float64)[:, None].expand(B, width).contiguous()


def test_within_inputs_keeps_static_fields_and_the_default_copies_them():
    state = Toy(rows(4, 2), rows(4, 3))
    index = torch.tensor([1, 1, 3, 2])  # within blocks of K = 2: {0, 1}, {2, 3}
    kept = reorder_state(state, index, within_inputs=True)
    assert kept.memory is state.memory
    assert kept.h[:, 0].tolist() == [1.0, 1.0, 3.0, 2.0]
    copied = reorder_state(state, index)
    assert copied.memory is not state.memory
    assert copied.memory[:, 0].tolist() == [1.0, 1.0, 3.0, 2.0]
    with full_reorder():
        forced = reorder_state(state, index, within_inputs=True)
    assert forced.memory is not state.memory and torch.equal(forced.memory, copied.memory)
    assert reorder_state(state, index, within_inputs=True).memory is state.memory  # reset
    assert [is_static(f) for f in dataclasses.fields(Toy)] == [False, True]


def test_reorder_methods_without_the_keyword_get_a_full_reorder():
    @dataclass
    class OldStyle:
        memory: torch.Tensor = static_field()

        def reorder(self, index):
            return OldStyle(self.memory.index_select(0, index))

    state = [OldStyle(rows(2, 1))]
    out = reorder_state(state, torch.tensor([1, 0]), within_inputs=True)
    assert out[0].memory.flatten().tolist() == [1.0, 0.0]


def test_beam_search_reorders_only_within_each_inputs_block(monkeypatch):
    case = CASES["bahdanau"]()
    seen = []

    def spy(state, index, **kw):
        seen.append((index.clone(), kw))
        return reorder_state(state, index, **kw)

    monkeypatch.setattr(beam_module, "reorder_state", spy)
    beam_search(case.model, case.state(), case.B, case.bos, case.eos, MAX_LEN, K, pad_id=case.pad)
    assert len(seen) >= 2
    block = torch.arange(case.B * K) // K  # (B·K,) the input of each row
    for index, kw in seen:
        assert kw == {"within_inputs": True}
        assert torch.equal(index // K, block)


# ---------------------------------------------------------------- every model family


@dataclass
class Case:
    """A model in float64 eval mode, a padded batch, and how to decode it."""

    model: torch.nn.Module
    state: Callable[[], object]
    B: int
    bos: int = BOS_ID
    eos: int = EOS_ID
    pad: int = PAD_ID


def seq2seq(name: str, **kw) -> Callable[[], Case]:
    def make() -> Case:
        torch.manual_seed(0)
        entry = MODELS.get(name)
        model = entry.target(entry.config_cls(**kw), src_vocab=V, tgt_vocab=V, pad_id=PAD_ID)
        model = model.double().eval()
        pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=7), 4, 0)
        b = collate_seq2seq(pairs)  # sources of different lengths: padded
        return Case(model, lambda: model.init_state(model.encode(b.src, b.src_mask), b.src_mask), 4)

    return make


def pointer_generator() -> Case:
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=8, hidden_size=10, attn_dim=7, out_dim=9)
    model = PointerGenerator(cfg, src_vocab=16, tgt_vocab=10, pad_id=PAD_ID).double().eval()
    src_vocab, tgt_vocab = Vocab([f"s{i}" for i in range(12)]), Vocab([f"s{i}" for i in range(6)])
    g = torch.Generator().manual_seed(0)
    examples = []
    for n in (2, 5, 3, 6):
        words = [f"s{int(i)}" for i in torch.randint(0, 12, (n,), generator=g)]
        examples.append(make_copy_example(words, words, src_vocab, tgt_vocab))
    b = collate_copy(examples)  # source OOVs get extended ids

    def state():
        return model.init_state(model.encode(b.src, b.src_mask, b.src_ext, b.n_oov), b.src_mask)

    return Case(model, state, 4)


def captioner() -> Case:
    torch.manual_seed(0)
    cfg = ShowAttendTellConfig(
        channels=(4, 6, 8), kernels=(3, 3, 3), emb_dim=6, hidden_size=10, attn_dim=7
    )
    model = ShowAttendTell(cfg, tgt_vocab=18, pad_id=PAD_ID, image_size=32).double().eval()
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1)).double()
    return Case(model, lambda: model.init_state(model.encode(images)), 3)


def pointer_net() -> Case:
    torch.manual_seed(0)
    model = PointerNet(PointerNetConfig(hidden_size=12, attn_dim=10), 2).double().eval()
    b = collate_pointer(geometry_examples("hull", 4, 3, 7, 0))
    src = b.src.double()
    return Case(model, lambda: model.init_state(model.encode(src, b.src_mask), b.src_mask), 4,
                bos=END, eos=END, pad=POS_PAD)  # fmt: skip


TRANSFORMER = {"d_model": 32, "n_heads": 4, "d_ff": 64, "decoder_layers": 2}
LUONG = {"emb_dim": 12, "hidden_size": 16}
CASES: dict[str, Callable[[], Case]] = {
    "transformer": seq2seq("transformer", **TRANSFORMER, encoder_layers=2),
    "transformer-prenorm": seq2seq("transformer", **TRANSFORMER, encoder_layers=1, norm_first=True),
    "convs2s": seq2seq("convs2s", emb_dim=16, channels=24, encoder_layers=2, decoder_layers=2),
    "bahdanau": seq2seq("bahdanau", emb_dim=12, hidden_size=16, attn_dim=10, readout_dim=6),
    "luong": seq2seq("luong", **LUONG, layers=2),
    "luong-no-feed": seq2seq("luong", **LUONG, input_feed=False, score="concat"),
    "cho": seq2seq("cho", emb_dim=12, hidden_size=16, readout_dim=6),
    "sutskever": seq2seq("sutskever", emb_dim=12, hidden_size=16, layers=2),  # no static field
    "pointer_generator": pointer_generator,
    "captioner": captioner,
    "pointer_net": pointer_net,
}


def static_values(state: object) -> list[object]:
    """The values of every static field in ``state`` (walking dataclasses and lists)."""
    out: list[object] = []
    if dataclasses.is_dataclass(state):
        for f in dataclasses.fields(state):
            value = getattr(state, f.name)
            out.extend([value] if is_static(f) else static_values(value))
    elif isinstance(state, (list, tuple)):
        for x in state:
            out.extend(static_values(x))
    return out


def tensors(x: object) -> list[torch.Tensor]:
    """Every tensor inside ``x`` (a tensor, a dataclass such as KVCache, or None)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if dataclasses.is_dataclass(x):
        return [t for f in dataclasses.fields(x) for t in tensors(getattr(x, f.name))]
    return []


class LogitsSpy:
    """Wraps a decoder; keeps the logits (B·K, V) of every step."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.logits = model, []

    def step(self, y_prev, state):
        logits, state = self.model.step(y_prev, state)
        self.logits.append(logits)
        return logits, state


def decode(case: Case):
    """Beam search through a ``LogitsSpy``: (result, logits of every step)."""
    spy = LogitsSpy(case.model)
    result = beam_search(spy, case.state(), case.B, case.bos, case.eos, MAX_LEN, K, N_BEST,
                         alpha=0.6, pad_id=case.pad)  # fmt: skip
    return result, spy.logits


@pytest.mark.parametrize("name", list(CASES))
def test_step_passes_static_fields_through_unchanged(name):
    case = CASES[name]()
    state = repeat_rows(case.state(), case.B, K)
    y = torch.full((case.B * K,), case.bos, dtype=torch.long)
    before = static_values(state)
    assert (len(before) == 0) == (name == "sutskever")
    for _ in range(3):
        logits, state = case.model.step(y, state)
        assert all(a is b for a, b in zip(static_values(state), before, strict=True))
        y = logits.argmax(-1)  # (B·K,)


@pytest.mark.parametrize("name", list(CASES))
def test_beam_search_is_the_same_with_and_without_the_skip(name):
    case = CASES[name]()
    fast, fast_logits = decode(case)
    with full_reorder():
        full, full_logits = decode(case)
    assert fast.meta["steps"] == full.meta["steps"] >= 2
    # Every hypothesis, not only the kept ones, saw the same state at every step.
    for a, b in zip(fast_logits, full_logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert torch.equal(fast.tokens, full.tokens)
    assert torch.equal(fast.lengths, full.lengths)
    assert fast.scores.dtype == torch.float64
    torch.testing.assert_close(fast.scores, full.scores, atol=1e-12, rtol=0)
    torch.testing.assert_close(fast.log_probs, full.log_probs, atol=1e-12, rtol=0)


class PointerSpy:
    """Wraps a decoder; records the data_ptr of every static tensor it is given."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.ptrs = model, []

    def step(self, y_prev, state):
        self.ptrs.append([t.data_ptr() for v in static_values(state) for t in tensors(v)])
        return self.model.step(y_prev, state)


@pytest.mark.parametrize("name", [n for n in CASES if n != "sutskever"])
def test_static_tensors_are_not_copied_between_steps(name):
    case = CASES[name]()
    spy = PointerSpy(case.model)
    # At least 4 steps; no input dropped when done (that copies static fields by design,
    # tests/decode/test_drop_done.py).
    search = {"beam_size": K, "min_len": 3, "pad_id": case.pad, "compact_done": False}
    beam_search(spy, case.state(), case.B, case.bos, case.eos, MAX_LEN, **search)
    # Step 1 runs on the B inputs; the expansion to B·K rows follows it.
    assert len(spy.ptrs) >= 4 and len(spy.ptrs[1]) > 0
    assert all(p == spy.ptrs[1] for p in spy.ptrs[2:])
    forced = PointerSpy(case.model)
    with full_reorder():
        beam_search(forced, case.state(), case.B, case.bos, case.eos, MAX_LEN, **search)
    # step 3's copies are made while step 2's tensors are alive: new addresses
    assert set(forced.ptrs[2]).isdisjoint(forced.ptrs[1])
