"""The speed job's scheduler pools: the file Spark reads declares the pools the job uses."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from speed_layer import job


def test_the_allocation_file_declares_exactly_the_pools_the_job_starts_queries_in() -> None:
    pools = ET.parse(job.SCHEDULER_POOLS_FILE).getroot().findall("pool")

    assert sorted(pool.get("name") or "" for pool in pools) == ["speed.others", "speed.views"]
    assert {job.VIEWS_POOL, job.OTHERS_POOL} == {"speed.views", "speed.others"}
    for pool in pools:  # what was measured: equal shares, jobs in order within a pool
        assert pool.findtext("schedulingMode") == "FIFO"
        assert pool.findtext("weight") == "1"
        assert pool.findtext("minShare") == "0"
