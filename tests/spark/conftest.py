"""Spark fixtures: ONE local[2] SparkSession for every Spark test, on loopback.

Its scratch folder (TMPDIR, SPARK_LOCAL_DIRS, java.io.tmpdir) is a pytest tmp dir, its
Python workers run this interpreter, and format("nsq") is registered. The environment the
JVM needs is set while it starts and restored right after.
"""
from __future__ import annotations

import os
import shutil

import pytest


def _have_spark() -> str | None:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed: {exc}"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "no Java runtime for Spark"
    return None


SKIP_REASON = _have_spark()


@pytest.fixture(scope="session")
def spark_scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-scratch")


@pytest.fixture(scope="session")
def spark(spark_scratch):
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    from nsqmp.spark.local import local_session

    saved = {k: os.environ.get(k) for k in
             ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "TMPDIR", "SPARK_LOCAL_DIRS")}
    try:
        session = local_session("nsqmp-tests", scratch=spark_scratch)
    finally:
        # the JVM (and through it the Python workers) took its environment at launch; the
        # rest of the test run gets the original one back
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield session
    session.stop()
