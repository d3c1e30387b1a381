"""The nightly batch run as an Airflow DAG: 02:00 UTC, one run at a time.

Copy into the DAGs folder of an Airflow whose workers have lambdaline installed
(or swap the BashOperator for a SparkSubmitOperator running
deploy/spark/lambdaline_main.py). ``{{ ds }}`` is the day the interval covers:
for the 02:00 run on 2026-01-06 it is 2026-01-05, the date the batch closes.
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

with DAG(
    dag_id="lambdaline_batch",
    schedule="0 2 * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one run at a time, as the batch store's lock also ensures
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    tags=["lambdaline"],
) as dag:
    BashOperator(
        task_id="batch_run",
        bash_command="lambdaline batch run --date {{ ds }}",
        env={"LAMBDALINE_STATE_DIR": "/var/lib/lambdaline"},
        append_env=True,
    )
