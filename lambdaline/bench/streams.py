"""Many ``GET /v1/stream`` clients in one process, for the benchmark's serving load.

``python -m lambdaline.bench.streams --port P --clients N --seconds S``, the key in
``LAMBDALINE_BENCH_KEY`` (not in the command line ``ps`` shows), connects N clients
(every view), prints ``connected N`` once all have their response headers, reads
every event for S seconds with one thread (``selectors``: a client costs a socket,
not a thread, so the load generator beside it keeps the CPU), then prints one JSON
line: events and rows received, and the clients whose stream ended early.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import sys
import time

from shared.settings.views import VIEW_NAMES

HEADERS_TIMEOUT_S = 30.0
KEY_VARIABLE = "LAMBDALINE_BENCH_KEY"


def _connect(port: int, key: str) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=HEADERS_TIMEOUT_S)
    client.sendall(
        f"GET /v1/stream?views={','.join(VIEW_NAMES)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"X-API-Key: {key}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(4096)
        if not chunk:
            raise ConnectionError("the server closed the stream before answering")
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise ConnectionError(f"the stream answered {status.decode(errors='replace')}")
    client.setblocking(False)
    return client


def run(port: int, key: str, clients: int, seconds: float) -> dict[str, int]:
    sockets = [_connect(port, key) for _ in range(clients)]
    print(f"connected {clients}", flush=True)
    selector = selectors.DefaultSelector()
    for client in sockets:
        selector.register(client, selectors.EVENT_READ, client)
    events = rows = ended = 0
    tails = {client: b"" for client in sockets}  # a marker may span two reads
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for ready, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
            client = ready.data
            try:
                data = client.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                ended += 1
                selector.unregister(client)
                client.close()
                continue
            # an event ends with a blank line; a row event starts "event: row"
            seen = tails[client] + data
            events += seen.count(b"\n\n") - tails[client].count(b"\n\n")
            rows += seen.count(b"event: row\n") - tails[client].count(b"event: row\n")
            tails[client] = seen[-10:]
    for client in sockets:
        client.close()
    return {"clients": clients, "events": events, "rows": rows, "ended_early": ended}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args()
    try:
        summary = run(args.port, os.environ[KEY_VARIABLE], args.clients, args.seconds)
    except (OSError, ConnectionError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
