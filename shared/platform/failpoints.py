"""Test hooks: named points where a batch run (or a promotion) waits to be killed with ``kill -9``.

A test sets ``$LAMBDALINE_FAILPOINT`` to one point's name, starts the run in a
process group of its own, waits for the ``failpoint_reached`` log line and
kills the group. The points:

- ``ingest_before_log``: an ingest micro-batch has written its partitions of
  the master dataset, and not yet its entry in the ingest log
  (:mod:`batch_layer.master`).
- ``ingest_before_commit``: it has written both, and Spark has not yet
  committed it.
- ``recompute_before_publish``: the new views are recomputed and collected to the
  driver, and nothing of the version is written (:mod:`batch_layer.run`).
- ``publish_tables``: the new version's tables are being written
  (:mod:`batch_layer.publish`).
- ``publish_before_pointer``: the version file is in place, ``CURRENT`` not
  yet replaced.
- ``promote_before_pointer``: ``lambdaline generation promote`` (or rollback) has
  found the generation ready, and not yet replaced ``ACTIVE``
  (:mod:`shared.platform.generations`).
"""

from __future__ import annotations

import logging
import os
import time

from shared.platform.logs import log_event
from shared.settings import FAILPOINT_ENV

logger = logging.getLogger("lambdaline.failpoints")

FAILPOINTS = frozenset(
    {
        "ingest_before_log",
        "ingest_before_commit",
        "recompute_before_publish",
        "publish_tables",
        "publish_before_pointer",
        "promote_before_pointer",
    }
)


def failpoint(name: str) -> None:
    """Wait here for good, after saying so, when ``$LAMBDALINE_FAILPOINT`` names this point."""
    assert name in FAILPOINTS, f"unknown failpoint {name}"
    if os.environ.get(FAILPOINT_ENV) == name:
        log_event(logger, "failpoint_reached", failpoint=name, pid=os.getpid())
        while True:  # wait here for the test to kill -9 this process
            time.sleep(1)
