"""The domain of lambdaline: what both layers compute, written once.

Event types and their wire format, validation and dead letters, the views as
DataFrame -> DataFrame functions, one module per view (:mod:`.views`, which lists them),
the topics by role, and the merge rule. It imports nothing else of the project:
window sizes, durations and topic names come in as plain values.
"""
