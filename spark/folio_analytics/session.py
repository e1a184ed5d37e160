"""The analytics service's one long-lived Spark session.

Owns: ``spark_session(master)``: a SparkSession on ``master`` (``local[*]`` by
default, any ``spark://`` master) whose Python workers run this interpreter,
bound to loopback when local, with the UI and the console progress bar off
(the service reports progress itself) and filter pushdown of Python data
sources on. Rule: one session per service process, started once when the
service is elected, reused by every run and query.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(master: str = "local[*]", app_name: str = "folio-analytics") -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("FOLIO_ANALYTICS_DRIVER_MEMORY", "1g"))
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
