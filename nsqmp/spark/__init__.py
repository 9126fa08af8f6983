"""NSQ for Apache Spark: the "nsq" format of PySpark 4's Python Data Source API.

    pip install 'nsqmp[spark]'

    import nsqmp.spark
    nsqmp.spark.register(spark)
    df = (spark.readStream.format("nsq").option("nsqd", "127.0.0.1:4150")
          .option("topic", "orders").option("channel", "spark").load())

Streaming and batch reads and writes; semantics and options in docs/spark.md. With
option("mode", "log") (nsqmp only) a topic is read as a log, like Spark's Kafka source:
offsets in the checkpoint, no channel (nsqmp/spark/log.py, docs/beyond-nsq.md).
"""
from __future__ import annotations

__all__ = ["SCHEMA", "NSQDataSource", "register"]


def _require_extra() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"nsqmp.spark needs PySpark 4 and pyarrow: pip install 'nsqmp[spark]' ({exc})") from exc


def register(spark) -> None:
    """Register the "nsq" format with a SparkSession (spark.dataSource.register)."""
    _require_extra()
    from nsqmp.spark.source import NSQDataSource

    spark.dataSource.register(NSQDataSource)


def __getattr__(name: str):
    if name in ("NSQDataSource", "SCHEMA"):
        _require_extra()
        from nsqmp.spark import source

        return getattr(source, name)
    raise AttributeError(name)
