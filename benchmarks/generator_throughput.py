"""Generator throughput against the embedded broker (a measurement, not a test).

    .venv/bin/python benchmarks/generator_throughput.py [--events N] [--workers W] [--sasl-ssl]

Starts its own broker on free ports in a temporary state folder, creates the
topics, sends N entries (with the exits, registrations, duplicates and malformed
records they imply) and prints records/s, entries/s and CPU seconds of the
generator processes. The broker shares the machine's cores, as it does in the demo.
The broker is stopped by pid at the end. With ``--sasl-ssl`` the broker and the
producers speak SASL_SSL (PLAIN, the broker's own certificate): what TLS and SASL
cost the generator.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import secrets
import tempfile
from pathlib import Path

from lambdaline.generator import GeneratorConfig, send_to_kafka
from lambdaline.kafka_broker import ephemeral_broker
from lambdaline.processes import exit_on_signals
from shared.platform.jvm import pom_properties
from shared.platform.topic_admin import create_topics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="entries to generate")
    parser.add_argument("--workers", type=int, default=None, help="producer processes")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--sasl-ssl", action="store_true", help="SASL_SSL broker and clients")
    args = parser.parse_args()
    security: dict[str, object] = {}
    if args.sasl_ssl:
        security = {
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_username": "bench",
            "kafka_sasl_password": secrets.token_urlsafe(12),
        }
    exit_on_signals()  # SIGTERM (`timeout`) runs the clean-up: the broker and jobs stop

    with (
        tempfile.TemporaryDirectory(prefix="lambdaline-bench-") as state,
        ephemeral_broker(Path(state), kafka_partitions=args.partitions, **security) as settings,
    ):
        create_topics(settings)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = send_to_kafka(GeneratorConfig(events=args.events), settings, args.workers)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)

    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    records = summary.records
    python, kafka = platform.python_version(), pom_properties()["kafka.version"]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {python}")
    protocol = settings.kafka.security_protocol
    print(f"broker: Kafka {kafka}, embedded, {args.partitions} partitions per topic, {protocol}")
    entries = summary.by_kind["entry"]
    print(f"entries: {entries:,}  records: {records:,}  wall: {summary.seconds:.1f} s")
    print(
        f"throughput: {records / summary.seconds:,.0f} records/s, "
        f"{summary.by_kind['entry'] / summary.seconds:,.0f} entries/s"
    )
    print(f"generator CPU: {cpu:.1f} s = {records / cpu:,.0f} records per CPU-second")


if __name__ == "__main__":
    main()
