"""``seqlab serve``: a trained checkpoint behind a JSON API and a web page (docs/serving.md).

``create_app(loaded, limits)`` builds the FastAPI app (``seqlab.serve.app``), ``serve``
runs it with uvicorn; requests are checked by ``seqlab.serve.schemas`` and micro-batched
by ``seqlab.serve.batching``. fastapi and uvicorn are imported only here, so the rest of
seqlab works without them.
"""

from seqlab.serve.schemas import Limits

__all__ = ["Limits", "create_app", "serve"]


def __getattr__(name: str):
    if name in ("create_app", "serve"):
        from seqlab.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'seqlab.serve' has no attribute {name!r}")
