"""What one client may ask of a worker: request sizes, requests per key, security headers.

Each limit is a setting of ``serving`` and is enforced before the work it
bounds is done:

- :class:`RequestLimits` (outermost ASGI layer): a request target longer than
  ``max_url_bytes`` gets 414, headers larger than ``max_header_bytes`` 431, a
  body larger than ``max_body_bytes`` 413: from its ``Content-Length`` before
  a byte of it is read, else as soon as the bytes read pass the limit. None of
  these needs an API key: they protect the worker, whoever asks.
- :class:`BoundedHttpTools` (the HTTP parser ``lambdaline serve`` runs): the
  same URL and header limits while the request head is still being parsed, so
  that no head larger than them is ever buffered (the ASGI layer sees a
  request only once its head is complete).
- :class:`KeyRates`: a token bucket per API key, per worker; a request past it
  gets 429 with ``Retry-After`` (:func:`serving.deps.require_api_key`).
- :data:`PAGE_HEADERS`: the dashboard's page and assets are served with a
  Content-Security-Policy of the same origin only, no framing, no sniffing and
  no referrer.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shared.settings import ServingSettings, get_settings

PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
"""The headers of the dashboard's page and its assets (``/`` and ``/dashboard/*``)."""

PAGE_PATHS = ("/dashboard/",)


def is_page(path: str) -> bool:
    return path == "/" or path.startswith(PAGE_PATHS)


class TooLargeError(Exception):
    """A request past a size limit: its status (413, 414, 431) and what to say."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def url_too_long(size: int, limit: int) -> TooLargeError:
    return TooLargeError(
        414, f"the request's path and query are {size} bytes; at most {limit} are read "
        "(serving_max_url_bytes)",
    )  # fmt: skip


def headers_too_large(size: int, limit: int) -> TooLargeError:
    return TooLargeError(
        431, f"the request's headers are more than {limit} bytes (serving_max_header_bytes); "
        f"{size} were sent",
    )  # fmt: skip


def body_too_large(size: int | None, limit: int) -> TooLargeError:
    sent = f"{size} bytes" if size is not None else "more"
    return TooLargeError(
        413, f"the request body is {sent}; at most {limit} bytes are read "
        "(serving_max_body_bytes)",
    )  # fmt: skip


def _header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    return sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"


def problem_body(message: str) -> bytes:
    """The body of a refusal: ``{"detail": ...}``, as every 4xx of the API."""
    return json.dumps({"detail": message}).encode()


async def _refuse(send: Send, error: TooLargeError) -> None:
    body = problem_body(error.message)
    await send({
        "type": "http.response.start", "status": error.status,
        "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                    (b"content-length", str(len(body)).encode())],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class RequestLimits:
    """Refuse requests past the size limits before the app reads them; add the
    dashboard's security headers.

    A request refused here never reaches the app, nor its authentication.
    """

    def __init__(self, app: ASGIApp, limits: ServingSettings):
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        target = len(scope.get("raw_path") or scope["path"].encode()) + len(scope["query_string"])
        length = dict(scope["headers"]).get(b"content-length")
        try:
            if target > limits.max_url_bytes:
                raise url_too_long(target, limits.max_url_bytes)
            if (head := _header_bytes(scope["headers"])) > limits.max_header_bytes:
                raise headers_too_large(head, limits.max_header_bytes)
            if length is not None and (not length.isdigit() or len(length) > 18):
                raise TooLargeError(400, "Content-Length is not a number of bytes")
            if length is not None and int(length) > limits.max_body_bytes:
                raise body_too_large(int(length), limits.max_body_bytes)
        except TooLargeError as error:
            await _refuse(send, error)
            return
        read = 0
        over: TooLargeError | None = None

        async def bounded_receive() -> Message:
            """The body, until it passes the limit: then the app is told the client left
            (what it says to that is replaced by the 413)."""
            nonlocal read, over
            if over is not None:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limits.max_body_bytes:
                    over = body_too_large(None, limits.max_body_bytes)
                    return {"type": "http.disconnect"}
            return message

        async def checked_send(message: Message) -> None:
            if over is not None:  # the app's answer to a body it could not read
                if message["type"] == "http.response.start":
                    await _refuse(send, over)
                return
            if message["type"] == "http.response.start" and is_page(scope["path"]):
                message["headers"] = [*message.get("headers", []), *PAGE_HEADERS]
            await send(message)

        await self.app(scope, bounded_receive, checked_send)


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with the URL and header limits applied while the
    head is parsed: no request head past them is buffered, and the answer is 414 or
    431 (uvicorn's own parser would buffer any head, and its refusals are 400s).

    uvicorn builds it with its own arguments, in each worker process; the limits
    come from the settings, as the app's do.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        serving = get_settings().serving
        self.max_url = serving.max_url_bytes
        self.max_header = serving.max_header_bytes
        self._in_head = True
        self._head_read = 0
        self._header_bytes = 0
        self._refusal: TooLargeError | None = None

    def data_received(self, data: bytes) -> None:
        if self._in_head:  # what the parser may hold before it calls back: bounded too
            self._head_read += len(data)
            if self._head_read > self.max_url + self.max_header + 1024:  # + request line
                self._refusal = headers_too_large(self._head_read, self.max_header)
                self.send_400_response("")
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > self.max_url:
            self._refuse(url_too_long(len(self.url) + len(url), self.max_url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self.max_header:
            self._refuse(headers_too_large(self._header_bytes, self.max_header))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_read = True, 0

    def _refuse(self, error: TooLargeError) -> None:
        """Stop the parser (uvicorn answers a parser error with ``send_400_response``)."""
        self._refusal = error
        raise error

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            super().send_400_response(msg)
            return
        error, self._refusal = self._refusal, None
        body = problem_body(error.message)
        reason = {413: b"Content Too Large", 414: b"URI Too Long",
                  431: b"Request Header Fields Too Large"}[error.status]  # fmt: skip
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (error.status, reason, len(body), body)
        )
        self.transport.close()


class KeyRates:
    """A token bucket per API key: ``rate`` requests a second, bursts of one second's
    worth. Only keys that passed authentication get a bucket, so their number is bounded
    by the configured keys."""

    def __init__(self, rate: float):
        self.rate = rate
        self._buckets: dict[str, tuple[float, float]] = {}
        """Per key: tokens left, and when that was counted (monotonic seconds)."""
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one request of ``key``'s bucket: 0 if it may go on, else the seconds until
        it may (its Retry-After)."""
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(key, (self.rate, now))
            tokens = min(self.rate, tokens + (now - then) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate


def retry_after(seconds: float) -> dict[str, str]:
    """A ``Retry-After`` header: whole seconds, at least 1."""
    return {"Retry-After": str(max(1, math.ceil(seconds)))}
