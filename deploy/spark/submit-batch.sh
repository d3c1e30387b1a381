#!/usr/bin/env bash
# Run the nightly batch (`lambdaline batch run ...`) with spark-submit, on any master.
#
#   SPARK_MASTER_URL=spark://spark-master:7077 \
#   LAMBDALINE_MASTER_DIR=hdfs://namenode:8020/lambdaline/master \
#   LAMBDALINE_KAFKA_BOOTSTRAP=kafka-1:9092,kafka-2:9092 \
#   deploy/spark/submit-batch.sh --date 2026-01-05
#
# Client deploy mode: the driver runs here, and writes the DuckDB versions to
# LAMBDALINE_BATCH_STORE_DIR (a local or mounted disk that the API hosts read).
# The master dataset and the ingest checkpoint live under LAMBDALINE_MASTER_DIR,
# which every executor must reach (HDFS, S3 via s3a:// with hadoop-aws on the
# classpath, a shared mount); a path on this machine's disk only works for local
# masters.
#
# The executors run no Python: every view is Spark SQL, so they need only the JVM
# and the connector jars (--jars); tests/integration/test_spark_cluster.py runs this
# script on a standalone cluster whose executors are given a Python that does not
# exist. A Python UDF added to a view would need Python 3.11+ and the project's
# packages on every executor: add --py-files and --conf spark.pyspark.python=...
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
project="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$project/.venv/bin/python}"
# a Spark installation's spark-submit, or the one pip installed with pyspark
export SPARK_HOME="${SPARK_HOME:-$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
spark_submit="$SPARK_HOME/bin/spark-submit"
master="${SPARK_MASTER_URL:-local[2]}"

# the Spark Kafka connector jars, resolved by Maven into the jar cache (make setup)
jars="$("$python" -c 'from shared.platform.jvm import spark_kafka_jars; from shared.settings import get_settings; print(",".join(str(j) for j in spark_kafka_jars(get_settings().jvm_cache_dir)))')"

exec "$spark_submit" \
  --master "$master" \
  --deploy-mode client \
  --name lambdaline-batch \
  --driver-memory "${SPARK_DRIVER_MEMORY:-2g}" \
  --jars "$jars" \
  --conf "spark.pyspark.driver.python=$python" \
  "$here/lambdaline_main.py" batch run "$@"
