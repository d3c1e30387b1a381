"""The plumbing both layers and the serving layer stand on.

Kafka (admin, security, topics), the JVM's jars, the Spark session and the
streaming helpers, the batch store's files, crash-safe files, locks,
failpoints, structured logs and process groups. Nothing here decides what a
view holds: that is :mod:`shared.domain`'s.
"""
