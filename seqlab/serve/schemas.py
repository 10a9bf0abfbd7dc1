"""The server's limits and its request bodies, checked by pydantic before any model runs.

Every body is strict JSON (``"beam": "5"`` is a wrong type, not 5) with no extra fields:
an unknown key such as ``"checkpoint"`` or ``"path"`` is refused by name, so no request
can point the server at a file. The length limits come from :class:`Limits`, so the
request classes are built per server by :func:`request_models`.

Bodies (``text`` is one string or a list of strings; the answer has one entry per text):

* ``POST /translate``  ``{"text", "beam", "nbest", "length_penalty", "coverage_penalty",
  "attention"}`` (a penalty left out is the run's own ``task.*`` setting)
* ``POST /generate``   ``{"prompt", "max_tokens", "temperature", "top_k", "top_p", "seed"}``
* ``POST /predict``    ``{"text"}``
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


@dataclass(frozen=True)
class Limits:
    """What one request may ask for, and how requests are batched.

    ``max_chars``: characters per text (and per prompt); ``max_texts``: texts per request;
    ``max_new_tokens``: tokens one ``/generate`` may sample; ``max_beam``: beam width;
    ``timeout_s``: seconds a request may wait for its answer (queue + decode) before a 503;
    ``max_body_bytes``: request body size (413 above it); ``batch_wait_ms``: how long the
    batcher gathers concurrent requests; ``batch_texts``: texts decoded in one call at most;
    ``max_pending``: requests waiting at once (503 above it).
    """

    max_chars: int = 1000
    max_texts: int = 32
    max_new_tokens: int = 256
    max_beam: int = 10
    timeout_s: float = 30.0
    max_body_bytes: int = 1_000_000
    batch_wait_ms: float = 5.0
    batch_texts: int = 64
    max_pending: int = 256

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_texts", "max_new_tokens", "max_beam", "batch_texts"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0 or self.batch_wait_ms < 0 or self.max_pending < 1:
            raise ValueError(
                "Limits: need timeout_s > 0, batch_wait_ms >= 0 and max_pending >= 1, got "
                f"{self.timeout_s}, {self.batch_wait_ms}, {self.max_pending}"
            )


class _Body(BaseModel):
    """Strict JSON types, unknown fields refused (each by its name)."""

    model_config = ConfigDict(strict=True, extra="forbid")


def check_texts(value: str | list[str], limits: Limits) -> str | list[str]:
    """``value`` unchanged if every text is non-blank and within ``limits``; else a
    ``ValueError`` saying which item and what to do."""
    texts = [value] if isinstance(value, str) else value
    where = (lambda i: "") if isinstance(value, str) else (lambda i: f"item {i} ")
    if not texts:
        raise ValueError("is an empty list: give at least one text")
    if len(texts) > limits.max_texts:
        raise ValueError(
            f"has {len(texts)} texts, more than the limit of {limits.max_texts} per request: "
            "send them in several requests"
        )
    for i, text in enumerate(texts):
        if not text.strip():
            raise ValueError(f"{where(i)}is empty or only spaces: give some text")
        if len(text) > limits.max_chars:
            raise ValueError(
                f"{where(i)}has {len(text)} characters, more than the limit of "
                f"{limits.max_chars}: shorten or split it"
            )
    return value


def request_models(limits: Limits) -> SimpleNamespace:
    """The request classes under ``limits``: ``.Translate``, ``.Generate``, ``.Predict``."""

    class Translate(_Body):
        """Translate ``text`` with beam search; ``attention`` adds the attention maps."""

        text: str | list[str]
        beam: int = Field(5, ge=1, le=limits.max_beam)
        nbest: int = Field(1, ge=1, le=limits.max_beam)
        # None: the run's own task.length_penalty / task.coverage_penalty
        length_penalty: float | None = Field(None, ge=0.0, le=5.0, allow_inf_nan=False)
        coverage_penalty: float | None = Field(None, ge=0.0, le=5.0, allow_inf_nan=False)
        attention: bool = False

        @field_validator("text")
        @classmethod
        def _texts(cls, value: str | list[str]) -> str | list[str]:
            return check_texts(value, limits)

        @field_validator("nbest")
        @classmethod
        def _nbest_in_beam(cls, value: int, info: ValidationInfo) -> int:
            beam = info.data.get("beam")  # absent when beam itself was invalid
            if beam is not None and value > beam:
                raise ValueError(f"{value} is more than beam ({beam}): need nbest <= beam")
            return value

    class Generate(_Body):
        """Sample ``max_tokens`` tokens after ``prompt`` (none: after a line boundary)."""

        prompt: str | None = None
        max_tokens: int = Field(50, ge=1, le=limits.max_new_tokens)
        temperature: float = Field(1.0, ge=0.0, le=10.0, allow_inf_nan=False)
        top_k: int = Field(0, ge=0)
        top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
        seed: int = Field(0, ge=0, le=2**63 - 1)

        @field_validator("prompt")
        @classmethod
        def _prompt(cls, value: str | None) -> str | None:
            return value if value is None else check_texts(value, limits)

    class Predict(_Body):
        """Classify or tag ``text``."""

        text: str | list[str]

        @field_validator("text")
        @classmethod
        def _texts(cls, value: str | list[str]) -> str | list[str]:
            return check_texts(value, limits)

    return SimpleNamespace(Translate=Translate, Generate=Generate, Predict=Predict)


def as_list(text: str | list[str]) -> list[str]:
    """A request's ``text`` as a list (one string → a list of one)."""
    return [text] if isinstance(text, str) else list(text)
