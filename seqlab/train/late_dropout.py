"""Late dropout (Liu, Xu, Wu, Darrell, Huang & Mei 2023, "Dropout Reduces Underfitting",
ICML, §5 "late dropout"): train without dropout for the first S updates, then with the
model's configured rates until the end.

    p(t) = 0     for updates t = 1 … S       (learns fast while it underfits)
    p(t) = p     for updates t > S           (regularises once it would overfit)

Every dropout site of the model follows it: each ``seqlab.nn.dropout.Dropout`` and
``torch.nn.Dropout`` (their ``p``) and every module that keeps its rate as a float
attribute ``dropout`` (``MultiHeadAttention``'s attention-weight dropout, ``nn.LSTM``'s
between-layer dropout, the RNN seq2seq models, the pointer-generator and the captioner,
whose ``F.dropout`` calls read that attribute). A functional dropout whose rate lives
anywhere else (a frozen config) would not follow: models keep the rate on the module.
p(t) depends on the update number only, so a resumed run sets the same rates as an
uninterrupted one. In eval mode no dropout is applied whatever p is.

``train.dropout_from_step`` S (``None``: off, dropout from the first update as usual).
The Trainer calls :meth:`LateDropout.apply` with the number of the update about to be taken.
"""

from __future__ import annotations

from torch import nn

from seqlab.nn.dropout import Dropout

__all__ = ["LateDropout", "dropout_sites"]

_MODULES = (Dropout, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


def dropout_sites(model: nn.Module) -> list[tuple[nn.Module, str, float]]:
    """(module, attribute, configured rate) for every dropout of ``model`` with a rate > 0."""
    sites = []
    for module in model.modules():
        if isinstance(module, _MODULES):
            attr = "p"
        elif isinstance(getattr(module, "dropout", None), float):
            attr = "dropout"
        else:
            continue
        rate = float(getattr(module, attr))
        if rate > 0.0:
            sites.append((module, attr, rate))
    return sites


class LateDropout:
    """p(t) of the module docstring for every site of ``model``; ``start`` S ≥ 0."""

    def __init__(self, model: nn.Module, start: int) -> None:
        if start < 0:
            raise ValueError(f"train.dropout_from_step must be >= 0, got {start}")
        self.start = start
        self.sites = dropout_sites(model)
        self._on: bool | None = None

    def apply(self, update: int) -> None:
        """Set every site's rate for update number ``update`` (1-based, the one to be taken)."""
        on = update > self.start  # updates 1 … S run without dropout
        if on == self._on:
            return
        for module, attr, rate in self.sites:
            setattr(module, attr, rate if on else 0.0)
        self._on = on
