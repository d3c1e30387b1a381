"""Two checkouts of the API, loaded in turn on one store (a measurement, not a test).

    .venv/bin/python benchmarks/serving_ab.py A B [--rate 300] [--seconds 10] [--rounds 6]
        [--workers 1] [--cache-mb 0]

A and B are checkouts of this project (e.g. ``.`` and a ``git worktree`` of an
earlier commit). This VM's speed drifts by up to a fifth between runs, more than
most changes to the server make, so two ``serving_load.py`` runs minutes apart
cannot tell them apart. Here both servers run at once, on the same populated
batch store (the one ``serving_load.py`` builds) and the same broker, and each
round sends the same open-loop booth-day load to A and then to B, in turns
(A, B; B, A; ...): a drift of the machine hits both alike. Per round and server
it reports the server's CPU per request (all its processes, from /proc), the
requests served per second and the p99 latency; then each server's medians and
in how many rounds B used less CPU than A.

Each server runs ``lambdaline serve`` with ``PYTHONPATH`` set to its checkout;
before the load starts the script checks that each imports ``serving`` from
there. Everything it starts it stops, by pid.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from serving_load import API_KEY, booth_day, full_day, populated_store, start_server, wait_ready

from lambdaline.bench.load import open_loop
from lambdaline.bench.measure import cpu_seconds_of_tree, percentile
from lambdaline.processes import exit_on_signals, stop_process


def checked_environment(checkout: Path, base: dict[str, str]) -> dict[str, str]:
    """The environment that makes ``lambdaline serve`` run this checkout's code."""
    environment = {**base, "PYTHONPATH": str(checkout)}
    found = subprocess.run(
        [sys.executable, "-c", "import serving; print(serving.__file__)"],
        env=environment, cwd=checkout, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not Path(found).resolve().is_relative_to(checkout):
        raise SystemExit(f"{checkout}: PYTHONPATH does not win, serving comes from {found}")
    return environment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="checkout A")
    parser.add_argument("b", type=Path, help="checkout B")
    parser.add_argument("--rate", type=float, default=300.0, help="requests/s offered")
    parser.add_argument("--seconds", type=float, default=10.0, help="per server and round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--cache-mb", type=int, default=0, help="0: every request reads DuckDB")
    args = parser.parse_args()
    exit_on_signals()  # SIGTERM (`timeout`) runs the clean-up: the broker and jobs stop

    with populated_store(args.cache_mb) as (_, base):
        servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
        try:
            for name, checkout in (("A", args.a.resolve()), ("B", args.b.resolve())):
                environment = checked_environment(checkout, base)
                servers[name] = start_server(environment, args.workers, cwd=checkout)
            for name, (port, server) in servers.items():
                wait_ready(port, server, f"server {name}")
            rounds: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
            for number in range(args.rounds):
                for name in ("A", "B") if number % 2 == 0 else ("B", "A"):
                    port, server = servers[name]
                    before = cpu_seconds_of_tree(server.pid)
                    result = open_loop(
                        port, API_KEY, booth_day, args.rate, args.seconds, ok=full_day
                    )
                    served = max(len(result.latencies_s), 1)
                    cpu_ms = (cpu_seconds_of_tree(server.pid) - before) / served * 1000
                    p99_ms = percentile(result.latencies_s, 0.99) * 1000
                    rounds[name].append((cpu_ms, result.served_per_s, p99_ms))
                    print(
                        f"round {number} {name}: server CPU {cpu_ms:.2f} ms/req, "
                        f"served {result.served_per_s:.0f}/s, p99 {p99_ms:.1f} ms, "
                        f"errors {result.errors}",
                        flush=True,
                    )
        finally:
            for _, server in servers.values():
                stop_process(server, grace=30)
    for name, runs in rounds.items():
        cpu, served, p99 = zip(*runs, strict=True)
        print(
            f"{name} ({args.a if name == 'A' else args.b}): server CPU median "
            f"{statistics.median(cpu):.2f} ms/req ({min(cpu):.2f}-{max(cpu):.2f}), "
            f"p99 median {statistics.median(p99):.1f} ms, "
            f"served {min(served):.0f}-{max(served):.0f}/s"
        )
    fewer = sum(b[0] < a[0] for a, b in zip(rounds["A"], rounds["B"], strict=True))
    print(f"B used less CPU than A in {fewer} of {args.rounds} rounds")


if __name__ == "__main__":
    main()
