"""Entry point for spark-submit: the `lambdaline` command, run as a Spark application.

    spark-submit [spark options] deploy/spark/lambdaline_main.py batch run --date 2026-01-05

spark-submit starts the JVM (master, memory and jars from its options); the
command then finds it running and takes the session from it.
"""

from lambdaline.cli import main

if __name__ == "__main__":
    main()
