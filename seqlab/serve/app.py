"""The FastAPI app of ``seqlab serve``: one loaded checkpoint behind a JSON API and a page.

    app = create_app(seqlab.load("runs/multi30k-transformer"))
    # uvicorn.run(app, host="127.0.0.1", port=8000)

Endpoints (which POST exists depends on the checkpoint's task; the others answer 404
with a message naming the right one):

    GET  /            the page (static/index.html: translation + attention heatmap,
                      LM sampling box, tagger entities)
    GET  /health      {"status": "ok", "task", "model"}
    GET  /info        model, task, step, parameters, config, vocabulary sizes,
                      precision, limits, batching counters
    POST /translate   translation, copy_translation (the pointer-generator also gives
                      p_gen / copied per output word with "attention"): {"text", "beam",
                      "nbest", "length_penalty", "coverage_penalty", "attention"}
                      → {"translations": [one ``seqlab translate --json`` record per text]}
    POST /generate    lm: {"prompt", "max_tokens", "temperature", "top_k", "top_p", "seed"}
                      → {"prompt", "continuation", "text"} (text = ``seqlab generate``'s)
    POST /predict     classify / tag: {"text"}
                      → {"predictions": [one ``seqlab predict --json`` record per text]}

Each POST is decoded by the task's own inference method — ``translate_detailed``,
``generate``, ``predict``, the methods ``seqlab.load`` binds and the CLI calls — through
the :class:`~seqlab.serve.batching.MicroBatcher`. Request bodies are checked by
``seqlab.serve.schemas`` and every error is JSON (``seqlab.serve.errors``).
"""

# no ``from __future__ import annotations``: FastAPI reads the handlers' body types (built
# per app by request_models) from their live annotations.
import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from seqlab import __version__
from seqlab.decode.precision import decoding_context, resolve_decode_precision
from seqlab.errors import SeqlabError
from seqlab.serve.batching import MicroBatcher, Overloaded
from seqlab.serve.errors import BodyLimit, error_response, install_handlers
from seqlab.serve.schemas import Limits, as_list, request_models
from seqlab.tasks.translation_eval import coverage_of

STATIC = Path(__file__).parent / "static"

# task name → the one POST endpoint that serves it
ENDPOINTS = {
    "translation": "translate",
    "copy_translation": "translate",  # the pointer-generator: one hypothesis, p_gen per word
    "lm": "generate",
    "classify": "predict",
    "tag": "predict",
}


class ServeError(Exception):
    """An answer other than 200 decided by a handler: (status, message, field)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def endpoint_of(task: str) -> str:
    """The POST endpoint of a task, or a SeqlabError saying which tasks can be served."""
    if task not in ENDPOINTS:
        served = ", ".join(sorted(ENDPOINTS))
        raise SeqlabError(
            f"a '{task}' checkpoint cannot be served: seqlab serve supports the tasks "
            f"{served} (train one of those, e.g. configs/multi30k-transformer.yaml)"
        )
    return ENDPOINTS[task]


def _redact(value: Any) -> Any:
    """The config with absolute paths cut to their file name (the page shows it)."""
    if isinstance(value, dict):
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if isinstance(value, str) and (value.startswith("/") or value.startswith("~")):
        return Path(value).name
    return value


def _member_names(checkpoints: list[str]) -> list[str]:
    """An ensemble's member checkpoints as ``run/checkpoint`` (``runs/pg-0/checkpoints/best``
    → ``pg-0/best``): which runs are pooled, without the server's absolute paths."""
    return [f"{Path(c).parent.parent.name}/{Path(c).name}" for c in checkpoints]


def _item_by_item(call: Any, items: list[Any]) -> list[Any]:
    """``call(items)``; if the batch holds a text the task refuses (SeqlabError), each
    item alone, so one bad text fails only its own request (the error is its result)."""
    try:
        return list(call(items))
    except SeqlabError:
        out: list[Any] = []
        for item in items:
            try:
                out.extend(call([item]))
            except SeqlabError as exc:
                out.append(exc)
        return out


class Server:
    """The loaded model, its limits and its batcher; the app's handlers call into it."""

    def __init__(self, loaded: Any, limits: Limits, precision: str = "fp32") -> None:
        self.loaded, self.limits = loaded, limits
        params = list(loaded.model.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        # fp32, bf16/fp16 autocast or int8 while decoding; "auto" resolved, the rest refused
        self.precision = resolve_decode_precision(precision, self.device)
        self.task = loaded.config.task
        self.endpoint = endpoint_of(self.task)
        if self.precision == "int8" and self.endpoint not in ("translate", "generate"):
            raise SeqlabError(
                f"precision int8 quantizes the linear layers of greedy, beam search and "
                f"sampling only; a '{self.task}' run is served at /{self.endpoint} without "
                "one: use --precision fp32 or bf16"
            )
        self.batcher = MicroBatcher(
            self.run, limits.batch_wait_ms, limits.batch_texts, limits.max_pending
        )

    # ------------------------------------------------------------------ decoding (thread)

    def run(self, key: Hashable, items: list[Any]) -> list[Any]:
        """Decode ``items`` (texts) with the settings ``key``; one result per item (a
        SeqlabError object for an item the task refused). Runs in the decode thread, under
        the server's precision (autocast is per thread, so it is entered here)."""
        with decoding_context(self.precision, self.device):
            return self._run(key, items)

    def _run(self, key: Hashable, items: list[Any]) -> list[Any]:
        kind, settings = key  # type: ignore[misc]
        task, model = self.loaded.task, self.loaded.model
        if kind == "translate":
            from seqlab.cli.translate_cmd import translation_record

            beam, nbest, length_penalty, coverage_penalty, attention = settings

            def call(texts: list[str]) -> list[Any]:
                results = task.translate_detailed(
                    model,
                    texts,
                    beam=beam,
                    nbest=nbest,
                    length_penalty=length_penalty,
                    return_attention=attention,
                    coverage_penalty=coverage_penalty,
                )
                return [translation_record(t) for t in results]

            return _item_by_item(call, items)
        if kind == "predict":
            from seqlab.cli.predict_cmd import record

            def call(texts: list[str]) -> list[Any]:
                return [record(t, p) for t, p in zip(texts, task.predict(model, texts))]

            return _item_by_item(call, items)
        # generate: one sampler per prompt (each seeded), as `seqlab generate`
        max_tokens, temperature, top_k, top_p, seed = settings
        out: list[Any] = []
        for prompt in items:
            try:
                text = task.generate(model, prompt, max_tokens, temperature, top_k, top_p, seed)
            except SeqlabError as exc:
                out.append(exc)
                continue
            p = prompt or ""
            joiner = " " if p and not task.is_char and not p.endswith("\n") else ""
            out.append({"prompt": prompt, "continuation": text, "text": p + joiner + text})
        return out

    # ------------------------------------------------------------------ requests (loop)

    async def decode(self, key: Hashable, items: list[Any], field: str) -> list[Any]:
        """Results of ``items`` through the batcher, within the request timeout."""
        try:
            results = await asyncio.wait_for(self.batcher.submit(key, items), self.limits.timeout_s)
        except asyncio.TimeoutError:  # (not the builtin on Python 3.10)
            raise ServeError(
                503,
                f"request timed out after {self.limits.timeout_s:g} s waiting for the model: "
                "retry, send fewer texts, or start the server with a longer --timeout",
            ) from None
        except Overloaded as exc:
            raise ServeError(503, f"server busy ({exc}): retry in a moment") from None
        for i, r in enumerate(results):
            if isinstance(r, SeqlabError):
                where = field if len(items) == 1 else f"{field}.{i}"
                raise ServeError(422, f"{where}: {r}", where)
        return results

    def _inference(self, dtype: str) -> str:
        """What /info reports as the inference precision: the weights' dtype, or autocast."""
        if self.precision == "fp32":
            return dtype
        if self.precision == "int8":
            return f"int8 linear layers while decoding ({dtype} weights)"
        return f"{self.precision} autocast ({dtype} weights)"

    def info(self) -> dict[str, Any]:
        loaded = self.loaded
        pooled = bool(getattr(loaded, "extra", {}).get("members"))
        params = list(loaded.model.parameters())
        dtype = str(params[0].dtype).replace("torch.", "") if params else "none"
        sizes = {k: v for k, v in loaded.task.model_kwargs().items() if k != "pad_id"}
        return {
            "seqlab": __version__,
            "task": self.task,
            "model": loaded.config.model,
            "endpoint": f"POST /{self.endpoint}",
            "checkpoint": Path(loaded.checkpoint).name,
            "step": loaded.step,  # an ensemble's: its first run's checkpoint and step
            # an ensemble's runs (folder/checkpoint: no absolute paths), else absent
            **({"members": _member_names(loaded.extra["members"])} if pooled else {}),
            "parameters": sum(p.numel() for p in params),
            "vocab_sizes": {k: v for k, v in sizes.items() if isinstance(v, int)},
            "precision": {
                "inference": self._inference(dtype),
                "trained": loaded.config.train.precision,
            },
            "device": str(self.device),
            "config": _redact(loaded.config.to_dict()),
            "limits": {
                k: getattr(self.limits, k)
                for k in (
                    "max_chars",
                    "max_texts",
                    "max_new_tokens",
                    "max_beam",
                    "timeout_s",
                    "max_body_bytes",
                )
            },
            "batching": self.batcher.stats.to_dict(),
        }


def create_app(loaded: Any, limits: Limits | None = None, precision: str = "fp32") -> FastAPI:
    """The app serving ``loaded`` (a ``seqlab.load`` result) under ``limits``, decoding in
    ``precision``: "fp32", "bf16"/"fp16" (autocast), "int8" or "auto" (``seqlab serve
    --precision``; a PrecisionError for one the device cannot run)."""
    limits = limits or Limits()
    server = Server(loaded, limits, precision)
    models = request_models(limits)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await server.batcher.start()
        try:
            yield
        finally:
            await server.batcher.stop()

    app = FastAPI(
        title="seqlab",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,  # the docs page loads scripts from a CDN; the server stays offline
        redoc_url=None,
    )
    app.state.server = server
    install_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, exc: ServeError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.field)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "task": server.task, "model": loaded.config.model}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return server.info()

    def wrong_task(name: str) -> Any:
        async def handler(request: Request) -> JSONResponse:
            return error_response(
                404,
                f"POST /{name} is not available: this server has a '{server.task}' model; "
                f"use POST /{server.endpoint}",
            )

        handler.__name__ = f"no_{name}"
        return handler

    for name in sorted(set(ENDPOINTS.values()) - {server.endpoint}):
        app.post(f"/{name}", include_in_schema=False)(wrong_task(name))

    if server.endpoint == "translate":

        @app.post("/translate")
        async def translate(body: models.Translate) -> dict[str, Any]:
            most = getattr(server.loaded.task, "max_nbest", None)  # a task that keeps fewer
            if most is not None and body.nbest > most:
                raise ServeError(
                    422,
                    f"nbest: {body.nbest} asked, but a '{server.task}' model keeps at most "
                    f"{most} hypothesis: send nbest {most}",
                    "nbest",
                )
            if body.coverage_penalty and body.beam > 1:
                try:
                    coverage_of(server.loaded.model, body.coverage_penalty)
                except ValueError as exc:
                    raise ServeError(422, f"coverage_penalty: {exc}", "coverage_penalty") from None
            settings = (
                body.beam,
                body.nbest,
                body.length_penalty,
                body.coverage_penalty,
                body.attention,
            )
            records = await server.decode(("translate", settings), as_list(body.text), "text")
            return {"translations": records}

    elif server.endpoint == "generate":

        @app.post("/generate")
        async def generate(body: models.Generate) -> dict[str, Any]:
            settings = (body.max_tokens, body.temperature, body.top_k, body.top_p, body.seed)
            (result,) = await server.decode(("generate", settings), [body.prompt], "prompt")
            return result

    else:

        @app.post("/predict")
        async def predict(body: models.Predict) -> dict[str, Any]:
            records = await server.decode(("predict", ()), as_list(body.text), "text")
            return {"predictions": records}

    return app


def serve(
    loaded: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: Limits | None = None,
    precision: str = "fp32",
) -> None:
    """Run the app with uvicorn until interrupted (``seqlab serve``)."""
    import uvicorn

    app = create_app(loaded, limits, precision)
    uvicorn.run(app, host=host, port=port, log_level="info")
