"""The decoder-step contract: generic state reordering, the Protocol, registered searches."""

import dataclasses
import inspect
from collections import namedtuple
from dataclasses import dataclass, field

import pytest
import torch

import seqlab.decode  # noqa: F401  (registers the searches)
from seqlab.decode import StepDecoder, reorder_state, repeat_rows
from seqlab.decode.state import state_device
from seqlab.registry import SEARCHES
from tests.decode import BOS, EOS, AttnGRUDecoder, ScriptedDecoder

Pair = namedtuple("Pair", "left right")


@dataclass
class Inner:
    x: torch.Tensor  # (B, 2)
    note: str = "kept"


@dataclass
class Outer:
    h: torch.Tensor  # (B, 3)
    inner: Inner
    caches: list  # of (B, ...) tensors
    pair: Pair
    extra: dict
    mask: torch.Tensor | None = None
    t: int = 4
    B: int = field(init=False)

    def __post_init__(self):
        self.B = self.h.size(0)


def rows(B, *shape):
    """Row b holds the value b everywhere, so a reorder is readable from the values."""
    return torch.arange(B, dtype=torch.float64).view(B, *[1] * len(shape)).expand(B, *shape)


def test_reorder_state_walks_nested_structures():
    B = 3
    state = Outer(
        h=rows(B, 3),
        inner=Inner(rows(B, 2)),
        caches=[rows(B, 2, 2), (rows(B, 1), None)],
        pair=Pair(rows(B, 1), 7),
        extra={"coverage": rows(B, 5), "name": "x"},
    )
    index = torch.tensor([2, 0, 0, 1])  # B' = 4
    new = reorder_state(state, index)
    for t in (new.h, new.inner.x, new.caches[0], new.caches[1][0], new.pair.left,
              new.extra["coverage"]):  # fmt: skip
        assert t.size(0) == 4
        assert t.flatten(1)[:, 0].tolist() == [2.0, 0.0, 0.0, 1.0]
    assert new.caches[1][1] is None and isinstance(new.caches[1], tuple)
    assert isinstance(new.pair, Pair) and new.pair.right == 7
    assert new.extra["name"] == "x" and new.inner.note == "kept" and new.t == 4
    assert new.mask is None
    assert new.B == 4  # init=False field recomputed by __post_init__
    assert state.h.size(0) == 3  # the input is not modified


def test_reorder_method_takes_precedence():
    calls = []

    @dataclass
    class Custom:
        h: torch.Tensor

        def reorder(self, index):
            calls.append(index.tolist())
            return Custom(self.h.index_select(0, index) * 10)

    out = reorder_state([Custom(rows(2, 1))], torch.tensor([1, 1]))
    assert calls == [[1, 1]] and out[0].h.flatten().tolist() == [10.0, 10.0]


def test_unknown_state_types_raise():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="reorder"):
        reorder_state(Opaque(), torch.tensor([0]))


def test_repeat_rows_and_device():
    state = Inner(rows(2, 1))
    out = repeat_rows(state, 2, 3, torch.device("cpu"))
    assert out.x.flatten().tolist() == [0, 0, 0, 1, 1, 1]  # hypothesis (b, k) in row b·K + k
    assert state_device(state) == torch.device("cpu")
    assert state_device(None) == torch.device("cpu")

    class Plain:  # not a dataclass, refers to itself: found through its attributes
        def __init__(self):
            self.me, self.h = self, torch.zeros(1, device="meta")

    assert state_device(Plain()) == torch.device("meta")
    assert state_device([1, {"a": (None, Inner(torch.zeros(1, device="meta")))}]).type == "meta"


def test_decoders_satisfy_the_protocol():
    assert isinstance(ScriptedDecoder({}, [1, 0, 0, 0]), StepDecoder)
    assert isinstance(AttnGRUDecoder(), StepDecoder)
    assert not isinstance(object(), StepDecoder)


@pytest.mark.parametrize("name", ["greedy", "beam", "sample"])
def test_registered_searches_take_their_config(name):
    entry = SEARCHES.get(name)
    params = inspect.signature(entry.target).parameters
    config = entry.config_cls(max_len=3)
    assert {f.name for f in dataclasses.fields(config)} <= set(params)
    dec = ScriptedDecoder({}, [0.1, 0.6, 0.2, 0.1])
    result = entry.target(dec, dec.init_state(2), 2, BOS, EOS, **dataclasses.asdict(config))
    assert result.meta["search"] == name and result.meta["max_len"] == 3
    assert result.tokens.size(-1) == 3  # EOS (.1) never wins greedily: max_len reached
