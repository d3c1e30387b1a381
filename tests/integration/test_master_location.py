"""A master_dir Spark cannot use stops the batch run before its ingest, naming why."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from batch_layer.master import MasterDatasetError, require_master_location

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        # no jars for the scheme: the case of s3a:// without hadoop-aws
        ("nofs://bucket/master", 'UnsupportedFileSystemException: No FileSystem for scheme "nofs"'),
        ("s3a://bucket/master", "ClassNotFoundException: Class org.apache.hadoop.fs.s3a."),
    ],
)
def test_a_file_system_spark_lacks_is_named_with_what_to_add(
    spark: SparkSession, location: str, reason: str
) -> None:
    with pytest.raises(MasterDatasetError) as refused:
        require_master_location(spark, location)
    message = str(refused.value)
    assert message.startswith(f"cannot use the master dataset at {location} (master_dir): ")
    assert reason in message
    assert message.endswith("(e.g. hadoop-aws for s3a://)")
    assert "\n" not in message  # one line: no Java stack trace


def test_a_local_folder_not_made_yet_is_usable(spark: SparkSession, tmp_path: Path) -> None:
    require_master_location(spark, str(tmp_path / "master"))  # the ingest makes it
