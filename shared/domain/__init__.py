"""The domain of lambdaline: what both layers compute, written once.

Event types and their wire format, validation and dead letters, the views as
DataFrame -> DataFrame functions, one declaration per view (:mod:`.view_specs`),
the topics by role, and the merge rule. It imports nothing else of the project:
window sizes, durations and topic names come in as plain values.
"""
