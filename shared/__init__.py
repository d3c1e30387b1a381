"""What the speed, batch and serving layers share; it imports no layer.

:mod:`shared.domain` holds the rules (events, validation, views, the merge),
:mod:`shared.platform` the plumbing (Kafka, Spark, files, locks, logs), and
:mod:`shared.settings` every tunable, in groups.
"""
