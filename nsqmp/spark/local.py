"""A local SparkSession bound to loopback, with the "nsq" format registered.

Used by the examples, the bench and the tests. Everything listens on 127.0.0.1 (driver,
block manager, no UI), Python workers run this interpreter (so they import pyarrow and
nsqmp), and Spark's scratch files go to one folder.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
# the nsq source ships a micro-batch's rows inside its tasks (docs/spark.md): the
# "task of very large size" / "large task binary" warnings are expected
logger.tasksize.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksize.level = error
logger.taskbinary.name = org.apache.spark.scheduler.DAGScheduler
logger.taskbinary.level = error
"""


def loopback_env(scratch: str | Path) -> dict[str, str]:
    """Environment for a driver process (and what it spawns) that stays on loopback."""
    scratch = str(scratch)
    return {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TMPDIR": scratch,
        "SPARK_LOCAL_DIRS": scratch,
    }


def local_session(app: str = "nsqmp", master: str = "local[2]", scratch: str | Path | None = None,
                  log_level: str = "ERROR", conf: dict[str, str] | None = None):
    """Build (or get) the SparkSession and register format("nsq").

    Sets the loopback environment in os.environ first: the JVM and the Python workers
    inherit it.
    """
    from pyspark.sql import SparkSession

    import nsqmp.spark

    scratch = Path(scratch or os.environ.get("NSQMP_SPARK_SCRATCH") or tempfile.mkdtemp(prefix="nsqmp-spark-"))
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ.update(loopback_env(scratch))
    log4j = scratch / "log4j2.properties"
    log4j.write_text(_LOG4J.format(level=log_level.lower()))
    java_opts = f"-Djava.io.tmpdir={scratch} -Dlog4j2.configurationFile=file:{log4j}"
    builder = (
        SparkSession.builder.appName(app).master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    nsqmp.spark.register(spark)
    return spark
