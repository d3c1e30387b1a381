"""The master dataset's folders and small files, through Hadoop's FileSystem.

The master dataset may live on a local disk, HDFS or S3 (``master_dir``): on a
cluster the driver's own file system is not where it is. So the batch layer
reaches it through the JVM's Hadoop client, as Spark does, never through
Python's ``os``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


def filesystem(spark: SparkSession, location: str) -> tuple[Any, Any]:
    """The Hadoop FileSystem and Path for a location (Java objects)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(location)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return path.getFileSystem(conf), path


def glob(spark: SparkSession, pattern: str) -> list[str]:
    """Paths matching a Hadoop glob, as strings ('' matches nothing)."""
    fs, path = filesystem(spark, pattern)
    statuses = fs.globStatus(path)
    return [str(status.getPath().toString()) for status in (statuses or [])]


def read_text(spark: SparkSession, location: str) -> str | None:
    """A small file's text, or None if there is no such file."""
    fs, path = filesystem(spark, location)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_new(spark: SparkSession, location: str, text: str) -> None:
    """Write a file that does not exist yet, whole or not at all: a temporary file, then a
    rename (a crash leaves the temporary file, which nothing reads)."""
    fs, _ = filesystem(spark, location)
    temporary = f"{location}.tmp"
    stream = fs.create(filesystem(spark, temporary)[1], True)  # True: overwrite
    try:
        stream.write(bytearray(text.encode("utf-8")))
        stream.hsync()
    finally:
        stream.close()
    rename(spark, temporary, location)


def rename(spark: SparkSession, source: str, target: str) -> None:
    """Rename a file or folder; OSError if the file system refuses (a target that exists)."""
    fs, source_path = filesystem(spark, source)
    if not fs.rename(source_path, filesystem(spark, target)[1]):
        raise OSError(f"cannot rename {source} to {target}")


def delete(spark: SparkSession, location: str) -> None:
    """Delete a file or a folder with all it holds (nothing if there is none)."""
    fs, path = filesystem(spark, location)
    fs.delete(path, True)
