"""A cap on request bodies, applied before any route parses one (pure ASGI middleware).

Without it the server reads and parses whatever a client sends (a 500 MB JSON body took 1.5 GB of
memory before its 422). A body over `Limits.max_body_bytes` gets a 413 at once: from its Content-Length
header before a byte of it is read, or, for a chunked body, as soon as the bytes received pass the cap.
A body within the cap is read whole (at most the cap) and handed to the app unchanged. The ASGI message
shapes are those of the ASGI HTTP spec (https://asgi.readthedocs.io/en/latest/specs/www.html).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tenfold.web.responses import json_response

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Message, Receive, Send], Awaitable[None]]


def too_large_message(size: str, max_bytes: int) -> str:
    """The 413's message: what was sent, what is allowed, what to do."""
    return (
        f"request body: {size}; allowed: at most {max_bytes:,} bytes (a request to this API is a few "
        "hundred bytes of JSON: send only the form's fields)"
    )


def declared_length(scope: Message) -> int | None:
    """The Content-Length header as a number, None when absent or not a number (chunked bodies)."""
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


class BodyLimit:
    """ASGI middleware: answer 413 to a body over `max_bytes`, before the app sees it."""

    def __init__(self, app: App, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def reject(self, scope: Message, receive: Receive, send: Send, size: str) -> None:
        await json_response({"message": too_large_message(size, self.max_bytes)}, 413)(scope, receive, send)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = declared_length(scope)
        if length is not None and length > self.max_bytes:
            await self.reject(scope, receive, send, f"{length:,} bytes")
            return
        chunks, total, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return  # the client left; nothing to answer
            chunk = msg.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await self.reject(scope, receive, send, f"more than {self.max_bytes:,} bytes (still sending)")
                return
            chunks.append(chunk)
            more = msg.get("more_body", False)
        body, replayed = b"".join(chunks), [False]

        async def replay() -> Message:
            if not replayed[0]:
                replayed[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
