"""Every error the server answers is JSON ``{"error": "<field>: <what> — <what to do>",
"field": "<field or null>"}`` with a 4xx status for bad input, never a 500.

* malformed JSON → 400, ``field`` "body", with the character position;
* a wrong type, a value out of range, an unknown key, an empty or oversize text → 422,
  ``field`` the dotted path (``text``, ``text.2``, ``beam``);
* a body over ``Limits.max_body_bytes`` → 413; an unknown path → 404; a wrong method →
  405; a request that waited longer than ``Limits.timeout_s`` or a full queue → 503.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send


def error_response(status: int, message: str, field: str | None = None) -> JSONResponse:
    """The one error shape of the server."""
    return JSONResponse({"error": message, "field": field}, status_code=status)


def _field(loc: tuple[Any, ...]) -> str:
    """``("body", "text", 2)`` → ``text.2``; the body itself → ``body``."""
    parts = [str(p) for p in loc[1:]] if loc and loc[0] == "body" else [str(p) for p in loc]
    return ".".join(parts) or "body"


def _describe(err: dict[str, Any]) -> str:
    """A readable sentence for one pydantic error."""
    kind, msg = err.get("type", ""), err.get("msg", "invalid value")
    if kind == "extra_forbidden":
        return "is not a field of this request: remove it (see GET /info for the fields)"
    if kind == "missing":
        return "is required"
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    return msg[:1].lower() + msg[1:]


def validation_message(errors: list[dict[str, Any]]) -> tuple[int, str, str]:
    """(status, message, field) for pydantic's ``errors()`` list: the first problem, named.

    A union such as ``text: str | list[str]`` reports each alternative's failure; they are
    folded into one ``should be a string or a list of strings``.
    """
    if not errors:
        return 422, "body: invalid request", "body"
    first = errors[0]
    if first.get("type") == "json_invalid":
        pos = first.get("loc", ("body", "?"))[-1]
        detail = first.get("ctx", {}).get("error", "not valid JSON")
        return 400, f"body: malformed JSON at character {pos} ({detail})", "body"
    loc = tuple(first.get("loc", ()))
    # drop union-member tags: ("body", "text", "list[str]", 3) → ("body", "text", 3)
    tags = {"str", "list[str]", "int", "float", "bool", "none"}
    clean = tuple(p for p in loc if not (isinstance(p, str) and p in tags))
    same = [e for e in errors if tuple(e.get("loc", ()))[: len(loc) - 1] == loc[:-1]]
    if len(clean) < len(loc) and len(clean) == 2 and len(same) > 1:
        return 422, f"{_field(clean)}: should be a string or a list of strings", _field(clean)
    if len(clean) == 1 and clean[0] == "body":
        if isinstance(first.get("input"), (str, bytes)):
            return 422, "body: send a JSON object with Content-Type: application/json", "body"
        return 422, "body: should be a JSON object", "body"
    name = _field(clean)
    message = f"{name}: {_describe(first)}"
    value = first.get("input")
    if first.get("type", "").endswith("_type") and len(repr(value)) <= 40:
        message += f" (got {value!r})"
    return 422, message, name


async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    status, message, field = validation_message(list(exc.errors()))
    return error_response(status, message, field)


async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 404:
        msg = f"no endpoint {request.url.path}: see GET /info for this model's endpoints"
    elif exc.status_code == 405:
        msg = f"{request.method} is not allowed on {request.url.path}"
    else:
        msg = str(exc.detail)
    return error_response(exc.status_code, msg)


def install_handlers(app: FastAPI) -> None:
    """JSON errors for validation, unknown paths and wrong methods."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)


class BodyLimit:
    """ASGI middleware: a request whose declared ``Content-Length`` exceeds ``max_bytes``
    gets a 413 before its body is read; a body sent without one (chunked) is counted as
    it arrives and refused the same way once it passes the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> JSONResponse:
        return error_response(
            413,
            f"body: more than {self.max_bytes} bytes: send fewer or shorter texts",
            "body",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                await error_response(400, "Content-Length is not a number", "body")(
                    scope, receive, send
                )
                return
            if int(length) > self.max_bytes:
                await self._too_large()(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        # no declared length: read and count the whole body first
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large()(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
